"""The test session's own HOME, caches and temp folder, and the checks at its end (a pytest plugin).

`isolate()` (called by conftest.py before anything else is imported) points HOME, the XDG folders,
TMPDIR and every cache the suite's tools use (Hugging Face, Ray, torch inductor, Triton, pip,
matplotlib, Jupyter / IPython, vLLM, Chromium's profile) at one new folder, `/tmp/kit-t-XXXXXXXX`
(short: Ray's socket paths must stay under 108 bytes), so that a token, a cache or a config left by an
earlier run can neither help nor hurt, and tags the environment with `KIT_TEST_SESSION`, which
every process the suite starts inherits (Ray's daemons, vLLM's engine core, Jupyter, Chromium).

At the session's end two checks fail the run (exit code 1, each finding printed):
- a process that carries this session's tag is still alive after a grace period (it is then
  killed, so that the machine is left clean);
- the suite wrote where it should not: a new top-level entry in the HOME it was started with, a
  file in its `~/.ray` (Ray's token), or a new top-level folder of this user's in the system temp
  folder named as the suite's tools name theirs (`TOOL_TEMP_NAMES`; a file of such a name, another
  job's log, is only noted). Other work on a shared machine writes caches
  into that HOME too, so deeper folders are not compared here: tests/test_isolation.py runs the
  suite's tests of each tool with a HOME and temp folder nobody else writes, and finds them empty.
A passing session's folder is removed when the process exits; a failing one's is kept and named.
Under pytest-xdist (`-n 2`) the controller does all of it: its workers inherit its environment
(conftest.py does not isolate them again) and run inside its session.
"""

from __future__ import annotations

import atexit
import fnmatch
import os
import shutil
import signal
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

TAG = "KIT_TEST_SESSION"
ORIGINAL_HOME = "KIT_TEST_ORIGINAL_HOME"
ORIGINAL_TMP = "KIT_TEST_ORIGINAL_TMPDIR"
WATCHED = (".ray",)
"""Folders of the original HOME walked in full at the session's end (Ray's token lives there); the
rest of it is compared by its top-level names only: other work on a shared machine writes its
caches there too. tests/test_isolation.py runs the suite's tool tests in a HOME nobody else writes."""
TOOL_TEMP_NAMES = (
    "ray",
    "pytest-of-*",
    "torchinductor_*",
    "playwright*",
    ".org.chromium.*",
    "vllm*",
    "jupyter*",
)
"""Top-level folders in the system temp folder that the suite's tools make there when a process of the
suite loses its TMPDIR. Only folders owned by this user count: a file of that name (another job's
`/tmp/vllm_test.log`), or a folder another user made, is not something the suite's tools make, and
is printed as a note, not a failure (on a shared machine other work writes there too)."""
GRACE_S = float(os.environ.get("KIT_TEST_GRACE_S", "15"))
"""How long a process of the suite may take to exit after the last test (a server being stopped)."""


@dataclass
class Session:
    """Where this test session keeps its HOME and temp folder, and what it was started with."""

    root: Path
    home: Path
    tmp: Path
    original_home: Path
    original_tmp: Path
    started: float = field(default_factory=time.time)
    home_before: set[str] = field(default_factory=set)
    tmp_before: set[str] = field(default_factory=set)
    passed: bool = False
    """Set at the session's end: the folder is then removed when the process exits."""

    def remove_if_passed(self) -> None:
        """At exit, after the handlers of what the tests loaded (registered later, run first: IPython
        writes its history into the session's HOME at exit)."""
        if self.passed:
            shutil.rmtree(self.root, ignore_errors=True)


def isolate() -> Session:
    """Point HOME, TMPDIR and the tools' caches at a new folder; tag the environment. Call it before
    anything that reads them is imported (Ray, torch, transformers, matplotlib, Jupyter)."""
    original_home = Path(os.environ.get("HOME") or Path.home())
    original_tmp = Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="kit-t-", dir=original_tmp))
    home, tmp = root / "home", root / "tmp"
    run = root / "run"
    for d in (home, tmp, run):
        d.mkdir(mode=0o700)
    cache, config, data = home / ".cache", home / ".config", home / ".local" / "share"
    os.environ.update(
        {
            TAG: root.name,
            ORIGINAL_HOME: str(original_home),
            ORIGINAL_TMP: str(original_tmp),
            "HOME": str(home),
            "XDG_CACHE_HOME": str(cache),
            "XDG_CONFIG_HOME": str(config),
            "XDG_DATA_HOME": str(data),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_RUNTIME_DIR": str(run),
            "TMPDIR": str(tmp),  # Ray's session folder (/tmp/ray otherwise), Chromium's profile, mkdtemp
            "RAY_TMPDIR": str(tmp),
            "HF_HOME": str(cache / "huggingface"),
            # the compile caches of the servers the kit starts (kit.engines.compile_cache); torch's,
            # Triton's and vLLM's own defaults lie under TMPDIR, HOME and XDG_CACHE_HOME above
            "KIT_CACHE_DIR": str(cache / "kit"),
            "PIP_CACHE_DIR": str(cache / "pip"),
            "MPLCONFIGDIR": str(config / "matplotlib"),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(data / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(run / "jupyter"),
            "IPYTHONDIR": str(home / ".ipython"),
            "VLLM_CONFIG_ROOT": str(config / "vllm"),
            "PLAYWRIGHT_BROWSERS_PATH": str(cache / "ms-playwright"),
        }
    )
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        os.environ.pop(name, None)  # the suite makes its own Ray token and cluster
    tempfile.tempdir = None  # recomputed from TMPDIR: pytest's tmp_path lands inside too
    session = Session(root, home, tmp, original_home, original_tmp)
    atexit.register(session.remove_if_passed)
    return session


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Live processes (not this one) whose environment carries KIT_TEST_SESSION=`tag`."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(TAG) == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} {proc.name()}: {' '.join(proc.cmdline())[:200]}"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"pid {proc.pid} (gone)"


def leftover_processes(tag: str, grace_s: float = GRACE_S) -> list[str]:
    """Processes of the session still alive after `grace_s`, described; each is then killed."""
    end = time.monotonic() + grace_s
    left = tagged_processes(tag)
    while left and time.monotonic() < end:
        time.sleep(0.5)
        left = tagged_processes(tag)
    described = [describe(p) for p in left]
    for proc in left:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    return described


def home_entries(home: Path) -> set[str]:
    """HOME's top-level names, and every file under its WATCHED folders (relative paths)."""
    out = {p.name for p in home.iterdir()} if home.is_dir() else set()
    for folder in WATCHED:
        for dirpath, _, files in os.walk(home / folder):
            out |= {str(Path(dirpath, f).relative_to(home)) for f in files}
    return out


def temp_entries(tmp: Path) -> set[str]:
    """Names in `tmp` that match TOOL_TEMP_NAMES (folders or not, anyone's)."""
    return {p.name for p in tmp.iterdir() if any(fnmatch.fnmatch(p.name, n) for n in TOOL_TEMP_NAMES)}


def made_by_a_tool(path: Path) -> bool:
    """A folder of this user's: what Ray, pytest, torch, vLLM, Jupyter and Chromium make in a temp folder."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def new_temp_entries(s: Session) -> tuple[list[Path], list[Path]]:
    """New tool-named entries of the system temp folder since the session began: (the tools' folders,
    the rest: files and other users' folders, which the suite's tools do not make)."""
    new = sorted(s.original_tmp / n for n in temp_entries(s.original_tmp) - s.tmp_before)
    return [p for p in new if made_by_a_tool(p)], [p for p in new if not made_by_a_tool(p)]


def writes_outside(s: Session) -> list[str]:
    """What appeared outside the session's folder since it began: new entries of the original HOME
    (top level, and files in its WATCHED folders), files of those folders changed, new tool folders
    in the system temp folder."""
    now = home_entries(s.original_home)
    found = [s.original_home / rel for rel in now - s.home_before]
    for rel in now & s.home_before:
        path = s.original_home / rel
        try:
            if "/" in rel and path.stat().st_mtime >= s.started:
                found.append(path)
        except OSError:
            continue
    found += new_temp_entries(s)[0]
    return sorted(str(p) for p in found)


class Guard:
    """The plugin: snapshots at the session's start, checks at its end."""

    def __init__(self, session: Session) -> None:
        self.s = session

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.s.started = time.time() - 1  # file times are coarser than time.time()
        self.s.home_before = home_entries(self.s.original_home)
        self.s.tmp_before = temp_entries(self.s.original_tmp)

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int):
        """After every other plugin's session end: under pytest-xdist the workers (which carry this
        session's tag) have exited by then."""
        result = yield
        say = session.config.get_terminal_writer().line
        problems = [
            f"still alive at the session's end (killed now): {p}"
            for p in leftover_processes(self.s.root.name)
        ]
        problems += [
            f"written outside the session's folders and the checkout: {p}" for p in writes_outside(self.s)
        ]
        for problem in problems:
            say(f"error: {problem}", red=True)
        for path in new_temp_entries(self.s)[1]:
            say(f"note: {path} appeared during the session; not a folder of this user's, so not the suite's")
        if problems:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.s.passed = session.exitstatus == 0
        if not self.s.passed:
            say(f"the session's HOME and temp folder are kept for a look: {self.s.root}")
        return result
