"""Shared fixtures: the embedded demo model (built once per machine), params files in tmp, one
shrunk `kit run` of the demo params per session (the pipeline and JupyterLab tests read the same run),
and one real vLLM server for the tests that only need one running (`vllm_server`: they run one after
the other, and it is stopped after the last of them).

Before anything else, the session gets its own HOME, caches and temp folder, and its end is checked
for processes left alive and files written outside those folders and the checkout (tests/isolation.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import isolation
import pytest
import yaml
from engines import SharedVllm
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / ".cache" / "demo" / "model"
SOURCES = ["infinity_instruct", "webinstructsub", "codefeedback", "metamathqa", "hermes_fc", "agentinstruct"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Property tests (tests/test_display.py): no time limit per example (two loaded cores can stall one),
# and no example database written into the checkout; a failure prints the example that falsified it.
settings.register_profile("kit", deadline=None, database=None)
settings.load_profile("kit")


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is imported: the session's own HOME, TMPDIR and caches, and its guard.
    A pytest-xdist worker was started by a controller that did this: it keeps the controller's
    environment (tag included), and the controller's guard checks the whole session."""
    if hasattr(config, "workerinput"):  # an xdist worker (not a pytest that a test starts in it)
        return
    config.pluginmanager.register(isolation.Guard(isolation.isolate()), "kit-isolation")


@pytest.fixture(scope="session")
def demo_model() -> Path:
    from kit.demo.model import ensure_demo_model

    return ensure_demo_model(DEMO_MODEL, quiet=True)


@pytest.fixture(scope="session")
def fixture_data(tmp_path_factory) -> Path:
    from kit.demo.fixtures import write_fixtures

    out = tmp_path_factory.mktemp("fixture-data")
    write_fixtures(out)
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def write_params(tmp_path, demo_model, fixture_data):
    """Write a params file for a small run over the demo model and fixture data; returns its path."""

    def make(name: str = "t", counts: dict[str, int] | None = None, **sections) -> Path:
        counts = counts or {s: 4 for s in SOURCES}
        base = {
            "run": name,
            "output_dir": str(tmp_path / "outputs"),
            "model": {"path": str(demo_model)},
            "engine": {"flavor": "transformers", "startup_timeout_s": 300},
            # levels of half a second: the tests check what is measured, not how well
            "decide": {
                "concurrencies": [1, 4],
                "num_prompts": 4,
                "max_tokens": 8,
                "spec_steps": [2],
                "level_s": 0.5,
                # every round, whatever the job: the tests check what is measured (the budget rule
                # that follows the job has tests of its own)
                "budget_share": 0,
            },
            "data": {
                "seed": 0,
                "sources": [
                    {
                        "name": s,
                        "adapter": s,
                        "dataset": "json",
                        "data_files": [str(fixture_data / f"{s}.jsonl")],
                        "count": n,
                    }
                    for s, n in counts.items()
                ],
            },
            "generate": {
                "sampling": {"max_tokens": 16, "temperature": 0.7, "seed": 0},
                "concurrency": 8,
                "shard_rows": 4,
                "shard_seconds": 5,
                "request_timeout_s": 120,
            },
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_merge(base, sections)))
        return path

    return make


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, demo_model) -> Path:
    """params/demo.yaml, shrunk (fewer prompts, shorter sweep) and pointed at a temporary output dir."""
    tmp = tmp_path_factory.mktemp("pipeline")
    params = yaml.safe_load((REPO / "params" / "demo.yaml").read_text())
    base = REPO / "params"
    params["output_dir"] = str(tmp / "outputs")
    params["model"]["path"] = str(demo_model)
    params["data"]["demo_fixtures"] = str(tmp / "data")
    for s in params["data"]["sources"]:
        s["count"] = 3
        s["data_files"] = [str(tmp / "data" / Path(f).name) for f in s["data_files"]]
    params["decide"].update(concurrencies=[1, 4], num_prompts=4, max_tokens=8, level_s=0.5)
    params["generate"]["sampling"]["max_tokens"] = 24
    path = tmp / "demo.yaml"
    path.write_text(yaml.safe_dump(params))
    assert (base / "demo.yaml").exists()
    done = subprocess.run([sys.executable, "-m", "kit.cli", "run", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp / "kit-run.stderr").write_text(done.stderr)  # what the user saw (tests/test_pipeline.py)
    return tmp / "outputs" / "demo"


SHARED_VLLM = "vllm_server"


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, demo_model) -> Iterator[SharedVllm]:
    """The session's one real vLLM server for tests that only need one running (tests/engines.py):
    call `.ready()` for the running server; each test writes its own run folder."""
    shared = SharedVllm(demo_model, tmp_path_factory.mktemp("shared-vllm"))
    _shared_vllm.append(shared)
    try:
        yield shared
    finally:
        shared.stop()
        _shared_vllm.remove(shared)


_shared_vllm: list[SharedVllm] = []


SHARED_SESSION = ("demo_run", SHARED_VLLM)
"""Session fixtures too costly to build once per pytest-xdist worker (a `kit run`, a vLLM server): the
test files that name one run on the same worker (`units`)."""


def units() -> dict[str, str]:
    """{test file: its unit of work under pytest-xdist}: each file its own unit (its module fixtures,
    real servers among them, are built once), and the files that name a fixture of `SHARED_SESSION`
    one unit. A file that uses one without naming it would only build it once more."""
    here = Path(__file__).parent
    files = sorted(p.name for p in here.glob("test_*.py"))
    unit = {f: f for f in files}

    def root(f: str) -> str:
        while unit[f] != f:
            f = unit[f]
        return f

    for name in SHARED_SESSION:
        users = [f for f in files if re.search(rf"\b{name}\b", (here / f).read_text())]
        for f in users[1:]:
            unit[root(f)] = root(users[0])
    return {f: root(f) for f in files}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201
    """`make test` runs `-n 2 --dist loadfile`: each worker takes whole units (`units`), not files."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    of = units()

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return of.get(Path(path).name, path)

    return ByUnit(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, the units with the most slow tests first (the scheduler hands them
    out in this order, so the two workers finish at about the same time). Then the tests that use the
    shared vLLM server run one after the other, where the first of them was: it runs (and spins,
    idle) only while they do."""
    if hasattr(config, "workerinput"):
        of = units()
        unit = [of.get(i.path.name, i.path.name) for i in items]
        slow, start = {}, {}
        for n, (u, i) in enumerate(zip(unit, items, strict=True)):
            slow[u] = slow.get(u, 0) + (i.get_closest_marker("slow") is not None)
            start.setdefault(u, n)
        order = sorted(range(len(items)), key=lambda n: (-slow[unit[n]], start[unit[n]], n))
        items[:] = [items[n] for n in order]
    users = [i for i in items if SHARED_VLLM in getattr(i, "fixturenames", ())]
    if len(users) < 2:
        return
    first = items.index(users[0])
    rest = [i for i in items[first:] if SHARED_VLLM not in getattr(i, "fixturenames", ())]
    items[first:] = users + rest


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last of a row of tests that use the shared vLLM server: stop it (a later test that
    asks starts it again)."""
    if nextitem is None or SHARED_VLLM not in getattr(nextitem, "fixturenames", ()):
        for shared in _shared_vllm:
            shared.stop()
