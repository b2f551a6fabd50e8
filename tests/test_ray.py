"""Stage 3 on Ray (`generate.executor: ray`), for real: a Ray cluster on this machine (`ray start
--head`, shared by the tests), `kit generate` as the driver, engine replicas as actors serving the
demo model through `transformers serve` (and one through the real vLLM CPU build). The rows are a
single-process run's, each id once, through a killed actor and a killed driver."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import REPO

from kit.generate.view import generation_tables
from kit.runfolder import RunFolder

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
RAY = Path(sys.executable).parent / "ray"
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
"""The cluster checks tokens; a driver joins with the token in ~/.ray/auth_token: the session's own
HOME (tests/isolation.py), where the fixture has Ray generate one, as a user does for a cluster."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_own_ray(own: str | None = None) -> None:
    """Stop this session's Ray cluster, and no other: every process whose arguments name the
    session's Ray temp folder (`own`; tests/isolation.py gives each session its own) followed by
    Ray's `ray/` (a `kit generate` whose params lie in that temp folder is not Ray's), with their
    children. `ray stop --force` stops every Ray process of the user on the machine: a second suite
    running beside this one lost its cluster mid-test that way ("Failed to connect to GCS")."""
    ray = (own or os.environ.get("RAY_TMPDIR") or os.environ["TMPDIR"]).rstrip("/") + "/ray"

    def ours(arg: str) -> bool:  # Ray's folder under it (its sessions, sockets), not the test's files
        return ray + "/" in arg or arg.endswith(ray)

    procs: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        if any(ours(a) for a in p.info["cmdline"] or ()):
            with contextlib.suppress(psutil.Error):
                procs |= {c.pid: c for c in [p, *p.children(recursive=True)]}
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(list(procs.values()), timeout=5)  # what ray stop gives them, then --force
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=10)


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-node Ray cluster (head only, 4 logical CPUs: two actors and one in place of a dead one),
    started once for the module, with token authentication and a token made the way Ray documents
    (`ray get-auth-token --generate`, docs/scaling.md): this HOME holds none before."""
    port = free_port()
    # the actors' workers import the kit of this checkout, as the driver does
    env = {**os.environ, **RAY_ENV, "PYTHONPATH": str(REPO)}
    token = Path.home() / ".ray" / "auth_token"
    assert not token.exists()  # nothing left by an earlier run can help
    made = subprocess.run([str(RAY), "get-auth-token", "--generate"], capture_output=True, text=True, env=env)
    assert made.returncode == 0 and token.read_text() == made.stdout, made.stderr[-2000:]
    # ports of its own beside a second suite's cluster on the same machine: Ray's defaults fix the
    # dashboard agent's 52365, which starts without a dashboard too (GCS: `port`; the rest pick free ones)
    own_ports = [f"--dashboard-agent-listen-port={free_port()}"]
    start = [
        str(RAY),
        "start",
        "--head",
        f"--port={port}",
        *own_ports,
        "--num-cpus=4",
        "--include-dashboard=false",
    ]
    # on a loaded machine the head's start can time out (Ray waits 30 s for its raylet, a fixed
    # figure): again, clean; under two suites side by side (load 6.6 on 2 CPUs) two tries failed
    for _ in range(3):
        done = subprocess.run(start, capture_output=True, text=True, env=env, timeout=300)
        if done.returncode == 0:
            break
        stop_own_ray()
    assert done.returncode == 0, done.stderr[-3000:]
    # the address the head says to join by (its node's IP, not 127.0.0.1: Ray checks that it matches)
    (address,) = set(re.findall(r"--address='([^']+)'", done.stdout + done.stderr))
    try:
        yield address
    finally:
        stop_own_ray()


def generate(
    params: Path, address: str | None, env_extra: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen:
    env = {**os.environ, **RAY_ENV, **(env_extra or {})}
    if address:
        env["RAY_ADDRESS"] = address
    cmd = [sys.executable, "-m", "kit.cli", "generate", str(params)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def ids_of(run: Path) -> list[str]:
    return pq.read_table(run / "generations", columns=["id"]).column("id").to_pylist()


def planned_ids(run: Path) -> set[str]:
    """The plan's ids less those the engine can never take (a prompt longer than the demo model's
    context: a permanent failure on one machine too)."""
    never = {json.loads(line)["id"] for line in (run / "failures.jsonl").read_text().splitlines()}
    return set(pq.read_table(run / "prompts.parquet", columns=["id"]).column("id").to_pylist()) - never


def wait_for(what: Callable[[], object], timeout: float, proc: subprocess.Popen | None = None) -> object:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the driver ended first ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        time.sleep(0.2)
    if proc is not None:
        proc.kill()
        pytest.fail(f"not seen within {timeout} s; the driver said: {proc.communicate()[1][-3000:]}")
    pytest.fail(f"not seen within {timeout} s")


def settled(count: Callable[[], int], quiet_s: float = 10.0, timeout: float = 180.0) -> int:
    """`count()` once it has not changed for `quiet_s`: a killed driver's actors live on until Ray
    sees their owner gone, and may land a shard or two meanwhile (on a loaded machine, seconds)."""
    end = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.5)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return last
    pytest.fail(f"rows still landing {timeout} s after the driver was killed")


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def shards_of(run: Path, actor: int) -> list[Path]:
    return sorted((run / "generations").glob(f"part-b*a{actor}-*.parquet"))


ON_RAY = {"executor": "ray", "ray": {"actors": 2, "block_rows": 4}, "concurrency": 2, "shard_rows": 2}
LONGER = {"sampling": {"max_tokens": 48, "temperature": 0.7, "seed": 0}}
COUNTS = {"metamathqa": 8, "codefeedback": 8, "webinstructsub": 8}


def test_two_actors_make_the_rows_of_a_single_process_run_once(write_params, ray_address: str) -> None:
    local = write_params("local", counts=COUNTS, generate={"concurrency": 4})
    code, err = finish(generate(local, None))
    assert code == 0, err[-3000:]
    on_ray = write_params("on-ray", counts=COUNTS, generate=ON_RAY)
    code, err = finish(generate(on_ray, ray_address))
    assert code == 0, err[-3000:]
    out = on_ray.parent / "outputs"
    ids = ids_of(out / "on-ray")
    assert len(ids) == len(set(ids)) == len(planned_ids(out / "on-ray")) > 20
    assert set(ids) == set(ids_of(out / "local")) == planned_ids(out / "on-ray")
    manifest = json.loads((out / "on-ray" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["exit_code"] == 0 and manifest["executor"] == "ray"
    actors = manifest["ray"]["actors"]
    # each actor ready while blocks waited took some; one whose server came up after the other had
    # taken them all is closed without work (2026-12-06, two suites side by side, load 6.6 on 2 CPUs:
    # actor 0's start never answered before actor 1 had made every row)
    assert len(actors) == 2 and any(a["rows"] > 0 for a in actors)
    assert all(a["blocks_done"] > 0 for a in actors if a.get("found_work")), actors
    assert all(a["blocks_done"] == 0 for a in actors if a.get("found_work") is not True), actors
    assert (
        sum(a["blocks_done"] for a in actors)
        == manifest["ray"]["blocks"]
        == -(-manifest["planned_prompts"] // 4)
    )
    names = {p.name for p in (out / "on-ray" / "generations").glob("part-*.parquet")}
    assert all(n.startswith("part-b") for n in names)  # per block and actor, each with its checksum
    assert all((out / "on-ray" / "generations" / f".{n}.crc32").exists() for n in names)
    shown = {t.title: t for t in generation_tables(RunFolder(out / "on-ray"))}  # notebook 03's tables
    assert sorted(int(a) for a in shown["Ray actors"].frame["actor"]) == [0, 1]
    timeline = pq.read_table(out / "on-ray" / "metrics.parquet").to_pandas()
    assert timeline["rows_done"].max() == len(ids)  # one timeline for the job, summed over actors
    assert "generate: 100%" in err  # one progress bar, the driver's, to the end
    analysed = subprocess.run([sys.executable, "-m", "kit.cli", "analyse", str(on_ray)], capture_output=True)
    assert analysed.returncode == 0, analysed.stderr[-3000:]  # stage 4 unchanged
    assert json.loads((out / "on-ray" / "summary.json").read_text())["rows"] == len(ids)


def test_an_actor_killed_mid_run_loses_nothing_and_doubles_nothing(write_params, ray_address: str) -> None:
    params = write_params("killed-actor", counts=COUNTS, generate={**ON_RAY, **LONGER})
    run = params.parent / "outputs" / "killed-actor"
    driver = generate(params, ray_address)
    wait_for(lambda: shards_of(run, 0), 300, driver)
    victim = json.loads((run / "ray" / "actor-a0.json").read_text())["pid"]
    assert psutil.Process(victim).nice() == 0  # not Ray's default 15 for workers: its loop keeps its CPU
    os.kill(victim, signal.SIGKILL)
    code, err = finish(driver)
    assert code == 0, err[-3000:]
    ids = ids_of(run)
    assert len(ids) == len(set(ids)) and set(ids) == planned_ids(run)
    manifest = json.loads((run / "manifest.json").read_text())
    dead = [a for a in manifest["ray"]["actors"] if a["died"]]
    assert [a["actor"] for a in dead] == [0], err[-3000:]
    assert manifest["ray"]["blocks_handed_again"] >= 1
    assert "Ray actor 0 died" in err


def test_a_killed_driver_is_resumed_by_the_same_command(write_params, ray_address: str) -> None:
    params = write_params("killed-driver", counts=COUNTS, generate={**ON_RAY, **LONGER})
    run = params.parent / "outputs" / "killed-driver"
    driver = generate(params, ray_address)
    wait_for(lambda: shards_of(run, 0) or shards_of(run, 1), 300, driver)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    before = settled(lambda: len(ids_of(run)))  # every row the killed session made, its actors' last too
    assert 0 < before < len(planned_ids(run))
    code, err = finish(generate(params, ray_address))
    assert code == 0, err[-3000:]
    ids = ids_of(run)
    assert len(ids) == len(set(ids)) and set(ids) == planned_ids(run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["rows_this_session"] == len(ids) - before


def test_a_driver_without_the_token_is_told_how_to_get_it(
    write_params, ray_address: str, tmp_path: Path
) -> None:
    params = write_params("no-token", counts={"metamathqa": 2}, generate=ON_RAY)
    (tmp_path / "empty-home").mkdir()
    code, err = finish(generate(params, ray_address, env_extra={"HOME": str(tmp_path / "empty-home")}))
    assert code == 2 and "Traceback" not in err, err[-3000:]
    assert f"could not join the Ray cluster at {ray_address}" in err
    for step in ("ray get-auth-token", "~/.ray/auth_token", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE=token"):
        assert step in err, step


def test_real_vllm_replicas_as_ray_actors(tmp_path: Path, demo_model: Path, ray_address: str) -> None:
    """A Ray actor starts a real vLLM replica and, when the job ends, leaves none of its processes.
    Its own server, not the shared one: the actor's starting and stopping it is what is tested."""
    from test_vllm_engine import demo_vllm

    generate_section = {"executor": "ray", "ray": {"actors": 1, "block_rows": 8}, "use_decision": False}
    path = demo_vllm(tmp_path, demo_model, "vllm-ray", generate=generate_section)
    params = yaml.safe_load(path.read_text())
    params["engine"]["speculative"] = {}
    for s in params["data"]["sources"]:
        s["count"] = 2
    path.write_text(yaml.safe_dump(params))
    run = tmp_path / "outputs" / "vllm-ray"
    driver = generate(path, ray_address)
    about = run / "ray" / "actor-a0.json"
    reaper = psutil.Process(
        json.loads(wait_for(lambda: about.exists() and about.read_text(), 600, driver))["reaper_pid"]
    )
    server_group = reaper.children()[0].pid  # the server leads its own process group
    code, err = finish(driver, timeout=800)
    assert code == 0, err[-3000:]
    time.sleep(2)
    left = [p.pid for p in psutil.process_iter() if _group_of(p.pid) == server_group]
    assert not left, f"the vLLM server's processes outlived the job: {left}"  # its EngineCore included
    ids = ids_of(run)
    assert len(ids) == len(set(ids)) and set(ids) == planned_ids(run)
    manifest = json.loads((run / "manifest.json").read_text())
    (actor,) = manifest["ray"]["actors"]
    assert actor["engine_capacity"] and actor["rows"] == len(ids)
    assert json.loads(pq.read_table(run / "generations").column("engine")[0].as_py())["flavor"] == "vllm"


def test_the_suite_stops_its_own_ray_processes_and_no_one_elses(tmp_path: Path) -> None:
    """`stop_own_ray` picks processes by their session's Ray temp folder in their arguments: a process
    naming another folder (a second suite's cluster beside this one, here `a-b`) is left running."""
    sleep = [sys.executable, "-c", "import time, sys; time.sleep(120)"]
    ours = subprocess.Popen([*sleep, f"--session-dir={tmp_path}/a/ray/session_x"])
    theirs = subprocess.Popen([*sleep, f"--session-dir={tmp_path}/a-b/ray/session_y"])
    try:
        stop_own_ray(str(tmp_path / "a"))
        assert ours.wait(timeout=30) is not None and theirs.poll() is None
    finally:
        for p in (ours, theirs):
            p.kill()
            p.wait()
