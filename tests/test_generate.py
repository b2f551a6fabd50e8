"""Stage 3 against a real `transformers serve`: exactly-once output through kills and crashes."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import psutil
import pyarrow.parquet as pq
import pytest
import yaml

from kit.errors import RunFolderError
from kit.params import load_params
from kit.runfolder import RunFolder

pytestmark = pytest.mark.slow
KIT = [sys.executable, "-m", "kit.cli"]
# Long enough (about 60 requests one at a time) to be interrupted mid-run on a fast machine too.
LONGER = {s: 10 for s in ("infinity_instruct", "webinstructsub", "codefeedback", "metamathqa", "hermes_fc")}
# Eight at once: 25 requests leave 8 in flight and more queued when the first shard lands (3 rows).
MID_RUN = {s: 5 for s in LONGER}
SLOW = {"shard_rows": 3, "shard_seconds": 2, "concurrency": 1, "sampling": {"max_tokens": 96, "seed": 0}}
MARGIN = {"max_prompt_tokens": 1024}
"""Prompts planned with a clear margin: at most 1,024 tokens, half the demo model's context of 2,048
(SLOW's 96 new tokens fit beside any of them). The fixture files' ordinary prompts reach ~810 tokens
with the demo tokenizer; each planted long one, 1 row in 50, is past 2,000. Without a limit the plans
of MID_RUN and LONGER hold three of those (2,056, 2,057 and 2,646 tokens), written off before sending
as `context_overflow` in every run: two within 0.5% of the context, where a few tokens more or less
(another tokenizer build, another chat template) decide whether a prompt is written off by the kit or
sent to an engine that may refuse it (transformers from 5.25: HTTP 400). Tests of restarts must not
hang on that: with MARGIN the plan examines further rows instead, and nothing is written off."""
CONTEXT = 2048


def _sigint_default() -> None:
    """As from a terminal: a shell that starts pytest in the background leaves SIGINT ignored, and
    `nohup make test` SIGHUP; an ignored signal stays ignored in the kit (as `nohup` intends)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def kit_generate(params_file: Path, *extra: str, **kw) -> subprocess.Popen:
    log = open(params_file.with_suffix(".log"), "ab")
    return subprocess.Popen(
        [*KIT, "generate", str(params_file), *extra],
        stdout=log, stderr=log, start_new_session=True, preexec_fn=_sigint_default, **kw,
    )  # fmt: skip


def rows_of(folder: RunFolder) -> list[str]:
    paths = folder.shard_paths()
    return pq.read_table(paths, columns=["id"]).column("id").to_pylist() if paths else []


def planned_ids(folder: RunFolder) -> set[str]:
    return set(pq.read_table(folder.prompts, columns=["id"]).column("id").to_pylist())


def failure_records(folder: RunFolder) -> list[dict]:
    if not folder.failures.exists():
        return []
    return [json.loads(x) for x in folder.failures.read_text().splitlines()]


def failed_ids(folder: RunFolder) -> set[str]:
    return {f["id"] for f in failure_records(folder) if f["permanent"]}


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_kill9_at_several_points_then_resume_exactly_once(write_params):
    """Also: a second `kit generate` on the folder is refused, naming the holder; a killed holder's
    lock does not block the next run. The kills come one request at a time (slow enough to land
    mid-run); the resume that finishes the run sends 8 at once (concurrency is no part of the rows'
    identity), so the forty-odd rows left take seconds, not minutes."""
    params_file = write_params("kill", counts=LONGER, generate=SLOW, data=MARGIN)
    folder = RunFolder(load_params(params_file).run_dir)
    for new_shards in (1, 2):
        proc = kit_generate(params_file)
        n = len(folder.shard_paths()) + new_shards
        wait_for(
            lambda n=n, proc=proc: len(folder.shard_paths()) >= n or proc.poll() is not None,
            300,
            f"{new_shards} new shard(s)",
        )
        assert proc.poll() is None, "generation finished before it could be killed: make the run longer"
        if new_shards == 1:
            second = subprocess.run([*KIT, "generate", str(params_file)], capture_output=True, text=True)
            assert second.returncode == 2, second.stderr[-2000:]
            assert f"another kit generate is writing into {folder.root}: pid {proc.pid} on " in second.stderr
        family = psutil.Process(proc.pid).children(recursive=True)
        assert family, "the server should be running under the kit"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(
            lambda family=family: not [p for p in family if alive(p)],
            30,
            "the orphaned server to be reaped",
        )
        assert not folder.manifest.exists()
        ids = rows_of(folder)
        assert len(ids) == len(set(ids))
    done_before = len(rows_of(folder))
    resume = params_file.with_name("kill-resume.yaml")
    params = yaml.safe_load(params_file.read_text())
    params["generate"]["concurrency"] = 8
    resume.write_text(yaml.safe_dump(params))
    resumed = subprocess.run([*KIT, "generate", str(resume)], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ids = rows_of(folder)
    manifest = json.loads(folder.manifest.read_text())
    assert_planned_with_margin(folder)
    assert_exactly_once(folder)
    assert manifest["complete"] and manifest["rows"] == len(ids) and len(ids) > done_before
    assert not folder.lock.exists(), "a finished run leaves no lock file (a killed one's never blocked)"


def server_processes(kit_pid: int) -> list[psutil.Process]:
    """The servers under the kit (not their reapers, whose command lines name the server's too)."""
    procs = psutil.Process(kit_pid).children(recursive=True)
    return [p for p in procs if "serve" in " ".join(p.cmdline()) and "reaper.py" not in " ".join(p.cmdline())]


def assert_planned_with_margin(folder: RunFolder, max_tokens: int = 96) -> None:
    """Every planned prompt and its new tokens fill at most half the context."""
    longest = max(pq.read_table(folder.prompts, columns=["prompt_tokens"]).column(0).to_pylist())
    assert longest + max_tokens <= CONTEXT // 2, longest


def assert_exactly_once(folder: RunFolder) -> None:
    ids = rows_of(folder)
    assert len(ids) == len(set(ids)), "an id was written twice"
    assert set(ids) == planned_ids(folder), "an id is missing"
    assert not failure_records(folder), f"a row was written off: {failure_records(folder)}"


def test_server_killed_mid_run_at_concurrency_8_is_restarted(write_params):
    """kill -9 of the server with 8 requests in flight: they wait for the restart and are retried."""
    params_file = write_params("crash", counts=MID_RUN, generate={**SLOW, "concurrency": 8}, data=MARGIN)
    folder = RunFolder(load_params(params_file).run_dir)
    proc = kit_generate(params_file)
    wait_for(lambda: len(folder.shard_paths()) >= 1 or proc.poll() is not None, 300, "a first shard")
    servers = server_processes(proc.pid)
    assert servers, "no server process found under the kit"
    for p in servers:
        p.kill()
    assert proc.wait(timeout=400) == 0, params_file.with_suffix(".log").read_text()[-3000:]
    manifest = json.loads(folder.manifest.read_text())
    assert manifest["server_restarts"] >= 1 and manifest["complete"] and manifest["exit_code"] == 0
    assert_exactly_once(folder)
    log = (folder.logs / "server-0.log").read_text()
    assert log.count("start 'server-0'") == 2 and not [p for p in servers if alive(p)]


def test_frozen_server_is_noticed_and_restarted(write_params):
    """SIGSTOP of the server, never lifted: the watchdog restarts it; no request is written off.
    The freeze is caught by hang_timeout_s; request_timeout_s is far above anything a loaded machine
    takes for a request, so that a slow answer of the restarted server never counts against it."""
    params_file = write_params(
        "hang",
        counts=MID_RUN,
        generate={**SLOW, "concurrency": 8, "request_timeout_s": 300, "hang_timeout_s": 8, "retries": 1},
        data=MARGIN,
    )
    folder = RunFolder(load_params(params_file).run_dir)
    proc = kit_generate(params_file)
    wait_for(lambda: len(folder.shard_paths()) >= 1 or proc.poll() is not None, 300, "a first shard")
    assert_planned_with_margin(folder)
    frozen = server_processes(proc.pid)
    assert frozen, "no server process found under the kit"
    for p in frozen:
        p.suspend()  # SIGSTOP: the process exists, but answers nothing
    code = proc.wait(timeout=400)
    assert code == 0, (failure_records(folder), params_file.with_suffix(".log").read_text()[-3000:])
    manifest = json.loads(folder.manifest.read_text())
    assert manifest["server_restarts"] >= 1 and manifest["complete"]
    assert_exactly_once(folder)
    log = params_file.with_suffix(".log").read_text()
    silent = [int(s) for s in re.findall(r"has not answered for (\d+) s \(hung", log)]
    # hang_timeout_s means what it says: caught at 8 s of silence (a probe's latency late), not twice that
    assert silent and max(silent) <= 10, silent
    assert not [p for p in frozen if alive(p)], "the frozen server was left behind"


def test_overlong_prompt_is_a_failure_row_and_the_run_completes(write_params, tmp_path, caplog):
    """Complete (exit 0: every planned row is generated or recorded as one the engine refuses for
    good), and the run says so in the manifest and in its last warning, not silently."""
    long_file = tmp_path / "long.jsonl"
    words = " ".join(f"word{i}" for i in range(3000))
    rows = [{"prompt": "Say hello."}, {"prompt": f"Summarise: {words}"}, {"prompt": "Count to three."}]
    long_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    source = {"name": "long", "adapter": "prompt_column", "dataset": "json", "data_files": [str(long_file)]}
    caplog.set_level(logging.INFO, logger="kit")  # as kit.cli sets it
    params = load_params(write_params("long", data={"sources": [source]}))
    from kit import stages

    manifest = stages.generate(params)
    folder = RunFolder(params.run_dir)
    failures = [json.loads(x) for x in folder.failures.read_text().splitlines()]
    assert [f["reason"] for f in failures] == ["context_overflow"]
    assert manifest["complete"] and manifest["rows"] == 2 and manifest["failures"] == 1
    assert manifest["never_generated"] == {"context_overflow": 1}
    assert "1 prompt(s) can never be generated as planned (1 context_overflow)" in caplog.text
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]  # what `kit generate` prints
    assert not [m for m in said if "is not checked because" in m or "capacity None" in m], said
    assert any(m.startswith("transformers does not say how many requests it runs at once: ") for m in said)
    assert all(p["why_not"] for p in manifest["premises"]["premises"].values())  # said there, once
    again = stages.generate(params)  # resume: nothing left, the rejected prompt is not retried
    assert again["rows_this_session"] == 0 and again["rows"] == 2


def test_an_engine_that_rejects_every_request_stops_the_run_and_loses_nothing(write_params):
    """transformers serve answers 422 to a field outside its schema: the run stops after the first
    rejections, the failures are not permanent, and the run completes once the field is gone."""
    from kit import stages
    from kit.errors import EngineError

    counts = {"metamathqa": 3, "codefeedback": 3}
    bad = load_params(
        write_params("storm", counts=counts, generate={"sampling": {"extra_body": {"no_such_field": 1}}})
    )
    with pytest.raises(
        EngineError, match=r"(?s)rejected the first 6 requests.*no_such_field.*nothing was lost"
    ):
        stages.generate(bad)
    folder = RunFolder(bad.run_dir)
    assert len(failure_records(folder)) == 6 and not failed_ids(folder) and not rows_of(folder)
    good = load_params(write_params("storm", counts=counts))
    done = stages.generate(good, fresh=True)
    assert done["complete"] and done["rows"] == 6


def test_changed_sampling_refuses_to_mix_and_fresh_archives(write_params):
    from kit import stages

    params = load_params(write_params("mix", counts={"metamathqa": 2, "codefeedback": 2}))
    first = stages.generate(params)
    assert first["complete"] and first["rows"] == 4
    folder = RunFolder(params.run_dir)
    ds = datasets.load_dataset("parquet", data_files=[str(p) for p in folder.shard_paths()], split="train")
    assert {"reasoning", "tool_calls", "reasoning_tokens"} <= set(ds.column_names)
    identity_file = folder.identity
    current = json.loads(identity_file.read_text())
    older = {k: v for k, v in current.items() if k != "row_schema"}  # as a kit before schema 2 wrote it
    identity_file.write_text(json.dumps(older))
    with pytest.raises(RunFolderError, match="another row schema .*--fresh"):
        stages.generate(params)
    identity_file.write_text(json.dumps(current))
    sampling = params.generate.sampling.model_copy(update={"temperature": 0.1})
    changed = params.model_copy(
        update={"generate": params.generate.model_copy(update={"sampling": sampling})}
    )
    saved = folder.params.read_text()
    with pytest.raises(RunFolderError, match=r"generate\.sampling\.temperature: 0\.7 -> 0\.1\)\. .*--fresh"):
        stages.generate(changed)
    assert folder.params.read_text() == saved, "a refused run left its params as the folder's own"
    assert not folder.earlier_params()
    again = stages.generate(changed, fresh=True)
    assert "temperature: 0.1" in folder.params.read_text(), "an accepted run saves its params"
    assert again["rows"] == 4 and again["rows_this_session"] == 4
    assert list((RunFolder(params.run_dir).root / "archive").glob("*/generations/part-*.parquet"))


def test_two_replicas_share_the_work(write_params):
    """engine.replicas: one server per GPU group, the client balancing on requests outstanding."""
    from kit import stages
    from kit.generate.session import replica_params

    params = load_params(
        write_params(
            "dp",
            counts={"metamathqa": 6, "codefeedback": 6},
            engine={"replicas": 2, "gpus_per_replica": 2},
            generate={"concurrency": 4},
        )
    )
    assert [replica_params(params, i).engine.env["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["0,1", "2,3"]
    manifest = stages.generate(params)
    assert manifest["complete"] and manifest["rows"] + manifest["failures"] == 12
    logs = RunFolder(params.run_dir).logs
    texts = [(logs / f"server-{i}.log").read_text() for i in (0, 1)]
    served = [t.count("POST /v1/chat/completions") for t in texts]
    assert min(served) >= 2, f"requests per replica: {served}"
    # launched side by side (kit.engines.all_started), not each after the one before was ready:
    # a transformers server takes well over 3 s to import torch and answer
    started = [dt.datetime.fromisoformat(re.search(r"==== kit (\S+): start", t)[1]) for t in texts]
    assert abs((started[1] - started[0]).total_seconds()) <= 3, started


def test_a_writer_clears_only_its_own_stale_temporary_files(tmp_path):
    from kit.generate.store import ShardWriter

    gen = tmp_path / "generations"
    gen.mkdir()
    own, other, untagged = (
        gen / ".part-s0of2-00003.parquet.x.tmp",
        gen / ".part-s1of2-00001.parquet.y.tmp",
        gen / ".part-00002.parquet.z.tmp",
    )
    for f in (own, other, untagged):
        f.write_text("half a shard")
    ShardWriter(gen, tag="s0of2")
    assert not own.exists() and other.exists() and untagged.exists()
    ShardWriter(gen)
    assert not untagged.exists() and other.exists()


def test_static_shards_merge_by_id(write_params):
    """--shard i/N: each node takes the ids that hash to it; together they cover the plan once."""
    from kit import stages

    params = load_params(write_params("shards", counts={"metamathqa": 5, "webinstructsub": 5}))
    manifests = [stages.generate(params, shard=f"{i}/2") for i in (0, 1)]
    folder = RunFolder(params.run_dir)
    ids = rows_of(folder)
    assert len(ids) == len(set(ids))
    assert set(ids) | failed_ids(folder) == planned_ids(folder)
    assert all(m["complete"] for m in manifests)
    assert {p.name for p in folder.root.glob("manifest-*.json")} == {
        "manifest-s0of2.json",
        "manifest-s1of2.json",
    }
    names = [p.name for p in folder.shard_paths()]
    assert any(n.startswith("part-s0of2-") for n in names) and any(n.startswith("part-s1of2-") for n in names)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_saves_finished_rows_and_stops_the_server(write_params, sig):
    """SIGINT (Ctrl-C, a kernel interrupt), SIGTERM (a scheduler), SIGHUP (a closed terminal): the
    rows buffered so far are flushed, the server is stopped, the exit code is 128 + the signal, and
    manifest.json says so (docs/operations.md); the lock file is gone."""
    params_file = write_params(
        "stop", counts=LONGER, generate={**SLOW, "shard_rows": 1000, "shard_seconds": 600}
    )
    folder = RunFolder(load_params(params_file).run_dir)
    proc = kit_generate(params_file)
    log = folder.logs / "server-0.log"
    # The server logs an answer before the kit has made it a row: at concurrency 1 the kit is at most
    # one answer behind (under two whole suites on two cores, 3 logged were 2 rows when the signal came).
    wait_for(
        lambda: log.exists() and log.read_text().count("POST /v1/chat/completions") >= 4, 300, "4 requests"
    )
    family = psutil.Process(proc.pid).children(recursive=True)
    assert not folder.shard_paths(), "nothing should be flushed before the interrupt"
    answered = log.read_text().count("POST /v1/chat/completions")
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == 128 + sig
    ids = rows_of(folder)
    assert len(ids) >= answered - 1 >= 3 and len(ids) == len(set(ids))
    said = params_file.with_suffix(".log").read_text()
    assert f"interrupted by {sig.name}: finished work is saved; rerun the same command to resume" in said
    manifest = json.loads(folder.manifest.read_text())
    ending = (manifest["status"], manifest["exit_code"], manifest["complete"])
    assert ending == ("interrupted", 128 + sig, False)
    assert manifest["rows"] == manifest["rows_this_session"] == len(ids) and manifest["left"] > 0
    assert not folder.lock.exists()
    wait_for(lambda: not [p for p in family if alive(p)], 30, "the server to stop")
