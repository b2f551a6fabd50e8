"""What the sweep sees of the machine, on real processes: the other arms' servers' CPU, idle or
paused, and a measurement they disturb."""

from __future__ import annotations

import contextlib
import os
import shlex
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

import pandas as pd
import psutil
import pytest
from conftest import REPO

from kit.decide.machine import gpu_watch
from kit.decide.machine.watch import (
    DISTURBED_CPU,
    MachineReading,
    canary_ms,
    idle_cpu,
    interference,
    judge,
    pause,
)

SPIN = "import time\nwhile True:\n    time.perf_counter()\n"


SPINNING_CHILDREN = 8


@pytest.fixture
def spinning_server():
    """A process that spins as an idle vLLM CPU server does, with children of its own (engine cores):
    a whole tree. Eight children, so that the tree takes enough of the CPU to be seen even beside a
    whole second test run: there (CI, 2026-12-05, load ~7.5 on 2 cores, others at 94% of the CPU) a
    root and one child got 6% of the machine between them, below the 10% that disturbs."""
    children = f"[subprocess.Popen([sys.executable, '-c', {SPIN!r}]) for _ in range({SPINNING_CHILDREN})]"
    code = f"import subprocess, sys\n{children}\nexec({SPIN!r})"
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while len(psutil.Process(proc.pid).children()) < SPINNING_CHILDREN and time.monotonic() < deadline:
        time.sleep(0.05)
    yield proc.pid
    for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
        p.kill()
    proc.wait()


def statuses(procs: list[psutil.Process]) -> set[str]:
    """The processes' states, given a second to show SIGSTOP (a signal lands asynchronously)."""
    deadline = time.monotonic() + 1
    while (seen := {p.status() for p in procs}) != {psutil.STATUS_STOPPED} and time.monotonic() < deadline:
        time.sleep(0.02)
    return seen


def test_idle_servers_are_seen_and_paused_as_a_tree(spinning_server):
    # nine spinning processes: the whole machine when quiet, a share of it beside other work
    assert idle_cpu([spinning_server], 0.5) > 0.05
    pause([spinning_server], paused=True)
    try:
        tree = [psutil.Process(spinning_server), *psutil.Process(spinning_server).children()]
        assert statuses(tree) == {psutil.STATUS_STOPPED}
        assert idle_cpu([spinning_server], 0.5) < 0.02
    finally:
        pause([spinning_server], paused=False)
    assert idle_cpu([spinning_server], 0.5) > 0.05
    pause([spinning_server], paused=True, roots_too=False)  # a reaper at the root stays awake
    try:
        assert statuses(psutil.Process(spinning_server).children()) == {psutil.STATUS_STOPPED}
        assert psutil.Process(spinning_server).status() != psutil.STATUS_STOPPED
    finally:
        pause([spinning_server], paused=False)


def tree_cpu_s(root: int) -> float:
    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def test_a_measurement_beside_a_busy_neighbour_is_disturbed(spinning_server):
    """The neighbour is the kit's own (a server of another arm): not foreign, but it disturbs. What
    share of the machine the spinning tree gets depends on what else runs (under a niced test run
    beside two whole suites it got 7%): the reading must agree with the tree's own CPU time over the
    same second, and what it then says follows from that share by the rule."""
    t0, w0 = tree_cpu_s(spinning_server), time.monotonic()
    before = MachineReading.now([spinning_server], neighbours=[spinning_server])
    time.sleep(1.0)
    seen = interference(before, [spinning_server], neighbours=[spinning_server])
    share = (tree_cpu_s(spinning_server) - t0) / ((time.monotonic() - w0) * psutil.cpu_count())
    assert seen.neighbour_cpu > 0.02 and seen.neighbour_cpu == pytest.approx(share, abs=0.05), share
    said = "the other arms' servers took" in seen.why
    assert said == (seen.neighbour_cpu > DISTURBED_CPU) and (seen.disturbed or not said), seen.why
    assert judge({"neighbour_cpu": 2 * DISTURBED_CPU}) == (
        f"the other arms' servers took {200 * DISTURBED_CPU:.0f}% of the CPU"
    )
    pause([spinning_server], paused=True)
    try:
        before = MachineReading.now([spinning_server], neighbours=[spinning_server])
        time.sleep(1.0)
        seen = interference(before, [spinning_server], neighbours=[spinning_server])
        assert seen.neighbour_cpu < 0.02
    finally:
        pause([spinning_server], paused=False)


def busy_threads():
    """Busy Python threads of this process, taking the GIL from the canary in turns, as the kit's own
    threads (the event loop's, the progress bars') may while a reading is taken; the benchmark's
    (benchmarks/bench_disturbance.py).

    Not a native thread (one that releases the GIL and runs on the other CPU meanwhile): where this
    machine's two CPUs are one core's two hyperthreads, it slows the canary for real, which is what
    the canary is there to see. The fresh-clone run of 2026-12-06 20:01 UTC (load 3.2 on 2 CPUs) read
    1.47x beside one and failed the < 1.3x below."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_disturbance import busy_threads as busy

    return busy(n_python=2, n_native=0)


@contextlib.contextmanager
def switching_often():
    """The GIL handed over every 0.5 ms (Python's default: 5 ms), so that the busy threads take it
    inside each of the canary's ~2 ms samples however the OS schedules them, not only now and then."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def running(cpu_s: float = 0.005, timeout_s: float = 5.0) -> None:
    """Wait until this process's other threads have taken `cpu_s` of CPU: on a loaded machine a thread
    just started may wait longer for its first time slice than the canary's readings last."""
    p0, t0, end = time.process_time(), time.thread_time(), time.monotonic() + timeout_s
    while time.process_time() - p0 - (time.thread_time() - t0) < cpu_s and time.monotonic() < end:
        time.sleep(0.001)


def test_the_canary_counts_its_own_thread_only():
    """The kit's other threads busy beside it do not slow the canary (it used to be timed in the
    whole process's CPU time, every thread's: the cause of false 'disturbed' flags). Alone and
    beside them in turns, as this shared machine's own speed wanders. What it guards: a canary
    slowed by the GIL handed back and forth (a wall-clock timing read 0.93x and 1.38x in two tries
    here); it cannot tell `time.process_time` from `time.thread_time` on this kernel, which charges
    the other threads' time at its 4 ms tick, longer than one of the canary's best-of samples."""
    alone, beside, others, ours = [], [], 0.0, 0.0
    rounds = 0
    # the premise, that the other threads took CPU time meanwhile, is met before the canary is
    # judged: the fresh-clone run of 2026-12-07 02:28 UTC (load 3-4 on 2 CPUs) read the threads at
    # 0.09 ms beside the canary's 32 ms in six rounds (they hardly ran), so more rounds until they do
    while rounds < 6 or (others <= 0.2 * ours and rounds < 40):
        rounds += 1
        alone += [canary_ms() for _ in range(3)]
        with busy_threads(), switching_often():
            running()
            p0, t0 = time.process_time(), time.thread_time()
            beside += [canary_ms() for _ in range(3)]
            others += time.process_time() - p0 - (time.thread_time() - t0)
            ours += time.thread_time() - t0
    assert others > 0.2 * ours, f"the busy threads took {1000 * others:.2f} ms beside {1000 * ours:.1f} ms"
    assert statistics.median(beside) < 1.3 * statistics.median(alone)


# --- what disturbs: the verdict from the signals --------------------------------------------------


def test_on_a_cpu_box_a_slow_canary_alone_disturbs():
    assert judge({"foreign_cpu": 0.01, "gpus": None}, slowdown=1.2) == ""
    why = judge({"foreign_cpu": 0.01, "gpus": None}, slowdown=1.5)
    assert why == "the CPU canary ran 1.5x slower than the sweep's median"


def test_on_a_gpu_box_a_slow_canary_alone_does_not_disturb():
    """The H200's false flags (issue 45): canaries 1.3-1.7x the median, others at most 0.8%; and the
    H100's 2.3x (2026-12-06) on a level that ran within 1% of its other measurements, others at 0.1%."""
    quiet = {"foreign_cpu": 0.008, "engine_core_foreign_cpu": 0.008, "engine_cores": 16, "gpus": 1}
    for slowdown in (1.3, 1.5, 1.7, 1.99, 2.29, 4.0):
        assert judge(quiet, slowdown=slowdown) == ""
    # corroborated: others took part of the engine's cores (not enough to disturb on their own)
    busy = quiet | {"engine_core_foreign_cpu": 0.07}
    assert judge(busy, slowdown=1.2) == ""
    assert judge(busy, slowdown=1.5) == (
        "the CPU canary ran 1.5x slower than the sweep's median while others took 7% of the engine's cores"
    )


def test_each_signal_says_its_name():
    assert judge({"foreign_cpu": 0.22}) == "other processes took 22% of the CPU"
    assert judge({"foreign_cpu": 0.04, "engine_core_foreign_cpu": 0.5, "engine_cores": 2}) == (
        "other processes took 50% of the engine's 2 core(s)"
    )
    assert judge({"neighbour_cpu": 0.3}) == "the other arms' servers took 30% of the CPU"
    assert judge({"gpus": 1, "gpu_foreign_seen": 2}) == "2 other process(es) ran on the engine's GPU"
    assert judge({"gpus": 1, "gpu_throttle": "hw_thermal,sw_power_cap", "gpu_throttle_s": 3.2}) == (
        "the GPU throttled (hw_thermal, 3.2 s thermal during the measurement)"
    )
    # the software power cap is the GPU's own limit under the measured load: recorded, not flagged
    assert judge({"gpus": 1, "gpu_throttle": "sw_power_cap,power_cap"}) == ""
    both = judge({"foreign_cpu": 0.22, "gpus": None}, slowdown=1.4)
    assert (
        both
        == "other processes took 22% of the CPU and the CPU canary ran 1.4x slower than the sweep's median"
    )
    assert (
        judge({"foreign_cpu": float("nan"), "gpus": float("nan"), "gpu_throttle": None}, slowdown=1.0) == ""
    )


def test_the_sweep_judges_its_rows_and_keeps_the_why():
    """sweep_runs as `flag_slow` sees it: on a GPU box the slow canary is kept as a figure, not a flag."""
    from kit.decide.measure.tables import RUN_COLUMNS, flag_slow

    rows = [{"canary_ms": c, "foreign_cpu": 0.005, "gpus": g, "disturbed": False, "phase": "sweep"}
            for g in (1, None) for c in (2.0, 2.0, 2.1, 3.2)]  # fmt: skip
    rows[0]["foreign_cpu"], rows[0]["disturbed"] = 0.3, True
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    assert runs.disturbed.tolist() == [True, False, False, False, False, False, False, True]
    assert runs.why.tolist()[0] == "other processes took 30% of the CPU"
    assert runs.why.tolist()[-1] == "the CPU canary ran 1.5x slower than the sweep's median"
    assert runs.slowdown.round(2).tolist()[3] == 1.52
    assert {"why", "engine_core_foreign_cpu", "gpu_throttle", "gpus"} <= set(RUN_COLUMNS)


def test_the_decision_says_what_disturbed_a_measurement():
    from kit.decide.choose.measured import noise_section, noise_sentences
    from kit.decide.measure.tables import RUN_COLUMNS, flag_slow, summarise

    rows = [{"round": r, "phase": "sweep", "arm": "plain", "spec_k": 0, "concurrency": 16, "status": "ok",
             "output_tok_s": 1000.0 + r, "canary_ms": 2.0, "foreign_cpu": 0.0, "gpus": 1,
             "gpu_throttle": "hw_thermal" if r == 1 else ""} for r in range(3)]  # fmt: skip
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=RUN_COLUMNS))
    noise = noise_section(summarise(runs), runs, None)
    assert [d["why"] for d in noise["disturbed"]] == ["the GPU throttled (hw_thermal)"]
    assert any("round 1 of plain at 16 concurrent ran while the GPU throttled (hw_thermal)" in s
               for s in noise_sentences(noise))  # fmt: skip


# --- the GPUs through NVML: a fake module with NVML's function names (no driver here) -------------


class FakeNvml:
    """NVML as nvidia-ml-py exposes it, for devices described here: each a dict of `pids` on it,
    its clock-event `reasons`, `sm_mhz`, and cumulative `thermal_ns` / `power_ns` violation times
    (a device's missing key raises, as NVML's NOT_SUPPORTED does)."""

    NVML_CLOCK_SM = 1
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1

    class NVMLError(Exception):
        pass

    def __init__(self, devices: list[dict], init_fails: bool = False) -> None:
        self.devices, self.init_fails, self.inits = devices, init_fails, 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict:
        return self.devices[i]

    def _get(self, h: dict, key: str):
        if key not in h:
            raise self.NVMLError("Not Supported")
        return h[key]

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict) -> list:
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self._get(h, "pids")]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: dict) -> int:
        return self._get(h, "reasons")

    def nvmlDeviceGetClockInfo(self, h: dict, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self._get(h, "sm_mhz")

    def nvmlDeviceGetViolationStatus(self, h: dict, policy: int):
        key = "thermal_ns" if policy == self.NVML_PERF_POLICY_THERMAL else "power_ns"
        return SimpleNamespace(referenceTime=0, violationTime=self._get(h, key))


@pytest.fixture
def fake_nvml(monkeypatch):
    def use(module) -> None:
        monkeypatch.setattr(gpu_watch, "nv", module)
        monkeypatch.setattr(gpu_watch, "_nvml_state", gpu_watch._NvmlState())

    return use


def stranger(code: str) -> int:
    """A Python process of this namespace that is not a child of this one (its parent shell exits at
    once), as another session's process is: the kit counts its own children as its own work."""
    shell = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} >/dev/null 2>&1 & echo $!"
    return int(subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True).stdout)


def kill_strangers(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            p.kill()
            p.wait(5)


@pytest.fixture
def gpu_stranger(tmp_path):
    """Another process of this namespace, not a child of the kit's (its parent shell exits), with a
    file named like the CUDA driver mapped (as a CUDA process has libcuda.so in /proc/PID/maps)."""
    lib = tmp_path / "libcuda.so.1"
    lib.write_bytes(b"\0" * 4096)
    ready = tmp_path / "mapped"
    code = (
        f"import mmap, pathlib, time\nf = open({str(lib)!r}, 'rb')\n"
        "m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)\n"
        f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)"
    )
    pid = stranger(code)
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    yield pid
    kill_strangers([pid])


def test_the_engines_gpu_is_read_through_nvml(fake_nvml, spinning_server, gpu_stranger):
    """GPU 0 runs the server and a stranger; GPU 1 another job (a host pid this namespace does not
    show): only GPU 0 is watched. During the measurement it throttles thermally for 2.5 s."""
    unseen = 4_000_000 + 7  # beyond any pid_max: a host pid a container would not show
    gpu0 = {
        "pids": [spinning_server, gpu_stranger],
        "reasons": 0x0,
        "sm_mhz": 1980,
        "thermal_ns": 10,
        "power_ns": 0,
    }
    gpu1 = {"pids": [unseen], "reasons": 0x40, "sm_mhz": 700, "thermal_ns": 0, "power_ns": 0}
    fake = FakeNvml([gpu0, gpu1])
    fake_nvml(fake)
    g = gpu_watch.read_gpus({spinning_server, *psutil.Process(spinning_server).children()})
    assert g is not None
    assert (g.gpus, g.watched, g.foreign, g.foreign_seen, g.reasons, g.sm_mhz) == (2, (0,), 2, 1, 0, 1980.0)

    before = MachineReading.now([spinning_server])
    gpu0.update(thermal_ns=10 + 2_500_000_000, reasons=0x20 | 0x4, sm_mhz=1400)
    seen = interference(before, [spinning_server])
    row = seen.as_dict()
    assert (row["gpus"], row["gpu_foreign_seen"], row["gpu_foreign_processes"], row["gpu_sm_mhz"]) == (
        2,
        1,
        2,
        1400.0,
    )
    assert row["gpu_throttle"] == "sw_thermal,sw_power_cap"
    assert row["gpu_throttle_s"] == pytest.approx(2.5)
    assert seen.disturbed
    assert "1 other process(es) ran on the engine's GPU" in seen.why
    assert "the GPU throttled (sw_thermal, 2.5 s thermal during the measurement)" in seen.why
    assert fake.inits == 1  # initialised once per process, not per reading


def test_the_gpu_without_the_server_and_without_strangers_is_calm(fake_nvml, spinning_server):
    """In a container NVML names the servers' processes by host pids: none of them is ours, none is
    seen here. Unknown, not foreign; a power cap is recorded, not flagged."""
    gpu = {
        "pids": [4_000_000 + 1, 4_000_000 + 2],
        "reasons": 0x1,
        "sm_mhz": 1980,
        "thermal_ns": 5,
        "power_ns": 0,
    }
    fake_nvml(FakeNvml([gpu]))
    before = MachineReading.now([spinning_server])
    gpu.update(reasons=0x4, power_ns=900_000_000)
    seen = interference(before, [spinning_server]).as_dict()
    assert (seen["gpus"], seen["gpu_foreign_seen"], seen["gpu_foreign_processes"]) == (1, 0, 2)
    assert seen["gpu_throttle"] == "sw_power_cap" and seen["gpu_throttle_s"] == 0.0
    assert judge(seen) == judge(seen | {"gpus": None, "gpu_throttle": None})  # the GPU added nothing


def test_a_gpu_nvml_cannot_tell_is_unknown(fake_nvml, monkeypatch):
    """No driver (this machine), NVML refusing each query (a container), or no nvidia-ml-py: the
    reading goes on, the GPU's signals unknown."""
    fake_nvml(FakeNvml([], init_fails=True))
    monkeypatch.setattr(gpu_watch, "_device_files", lambda: 0)
    assert gpu_watch.read_gpus({os.getpid()}) is None
    seen = interference(MachineReading.now([]), []).as_dict()
    assert (seen["gpus"], seen["gpu_throttle"], seen["gpu_foreign_seen"], seen["gpu_sm_mhz"]) == (None,) * 4
    monkeypatch.setattr(gpu_watch, "_device_files", lambda: 8)  # GPUs there, NVML not readable
    assert gpu_watch.read_gpus({os.getpid()}) == gpu_watch.GpuReading(8)
    fake_nvml(FakeNvml([{}]))  # every query NOT_SUPPORTED
    g = gpu_watch.read_gpus({os.getpid()})
    assert g is not None and (g.gpus, g.foreign, g.foreign_seen, g.reasons, g.sm_mhz) == (
        1,
        None,
        None,
        None,
        None,
    )
    fake_nvml(None)
    monkeypatch.setattr(gpu_watch, "_device_files", lambda: 0)
    assert gpu_watch.read_gpus({os.getpid()}) is None


def test_this_box_reads_no_gpu_and_says_so():
    """The real nvidia-ml-py here, without a driver: no exception, nothing known."""
    seen = interference(MachineReading.now([]), []).as_dict()
    assert seen["gpus"] is None or seen["gpus"] >= 1
    assert seen["gpu_throttle"] is None or isinstance(seen["gpu_throttle"], str)
    assert "why" in seen and "engine_core_foreign_cpu" in seen


# --- a real CPU hog on the engine's cores ---------------------------------------------------------


@pytest.fixture
def engine_on_two_cores():
    """A sleeping stand-in for an engine's process, pinned to the first two CPUs."""
    proc = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(120)"])
    cores = sorted(os.sched_getaffinity(0))[:2]
    psutil.Process(proc.pid).cpu_affinity(cores)
    yield proc.pid, cores
    proc.kill()
    proc.wait()


def test_busy_loops_on_the_engines_cores_disturb_it(engine_on_two_cores):
    """Two busy-looping processes on the engine's cores: the reading around them is disturbed, and
    its why says so (on the engine's cores, and of the whole CPU where they are a large share).
    They are not this process's children, which the kit counts as its own: as children they took
    nothing foreign, and the test passed only where other sessions loaded the machine."""
    engine, cores = engine_on_two_cores
    hogs = [stranger(SPIN) for _ in range(2)]
    try:
        for pid, c in zip(hogs, cores * 2, strict=False):
            psutil.Process(pid).cpu_affinity([c])
        time.sleep(0.2)
        before = MachineReading.now([engine])
        time.sleep(1.5)
        seen = interference(before, [engine])
    finally:
        kill_strangers(hogs)
    assert seen.engine_cores == len(cores)
    assert seen.engine_core_foreign_cpu is not None and seen.engine_core_foreign_cpu > DISTURBED_CPU
    assert seen.disturbed
    assert f"of the engine's {len(cores)} core(s)" in seen.why
    assert seen.as_dict()["why"] == seen.why


def test_the_kits_own_work_is_not_foreign(engine_on_two_cores):
    """The engine's (here: the kit's own) CPU time on the engine's cores is not counted as others'."""
    engine, cores = engine_on_two_cores
    before = MachineReading.now([engine])
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:  # the kit busy on its own: one core's worth
        sum(range(1000))
    seen = interference(before, [engine])
    share_of_engine_cores = 1.0 / len(cores)
    # other sessions on this shared box may take some; the kit's own core must not show up as theirs
    assert seen.engine_core_foreign_cpu is not None
    assert seen.engine_core_foreign_cpu < share_of_engine_cores + seen.foreign_cpu + 0.05


def test_the_quiet_gpu_sweeps_of_2026_12_06_flag_nothing():
    """Issue 45's quiet-box count on the GPU: the two SGLang sweeps measured on an H100 on 2026-12-06
    (docs/lab/h200/sglang/2026-12-06/), their signals judged again: 0 of 22 measurements disturbed
    (the rule before flagged 1, a 2.3x canary alone)."""
    from kit.decide.machine.watch import judge_runs

    root = REPO / "docs/lab/h200/sglang/2026-12-06"
    runs = pd.concat([pd.read_parquet(root / f"{n}/sweep_runs.parquet") for n in ("qwen3-8b", "backends")])
    runs = runs[runs.status == "ok"].drop(columns=["disturbed", "why"])
    assert len(runs) == 22 and (runs.gpus == 1).all() and runs.canary_ms.max() > 2 * runs.canary_ms.median()
    judged = judge_runs(runs)
    assert not judged.disturbed.any(), judged[judged.disturbed].why.tolist()
