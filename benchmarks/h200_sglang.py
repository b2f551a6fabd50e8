"""The kit on a real SGLang on the lent H200, in phases that fit the device tool's 10-minute calls.

    bash benchmarks/h200_pack_sglang.sh            # here, once: SGLang 0.5.16 -> .device/sgl/site.tar.xz
    # on the H200 (device tool, carry [".device/sgl"]; calls back to back keep /tmp/site and the caches):
    python3 benchmarks/h200_sglang.py --out $OUT setup probe decide
    python3 benchmarks/h200_sglang.py --out $OUT setup generate analyse ceiling
    python3 benchmarks/h200_sglang.py --out $OUT setup faults demo           # carry .cache/demo too
    python3 benchmarks/h200_sglang.py --out $OUT setup eagle                 # .device/whl: sgl-deep-gemm
    # here: unpack the run-*.tar.xz that came back; docs/lab/h200/sglang/README.md lists the files kept

Phases (each a subprocess of the kit's own commands, as a user runs them, under a time limit):
- setup: unpack the bundle to /tmp/site (and define the transformers class SGLang 0.5.16's Qwen-VL
  module imports, gone from the device's transformers 5.17), check the imports, write the shape-only
  models (`kit model-shape`; `H200_SHAPES=qwen3.6-27b` writes only those named) and the fixture data
  (400 rows per source);
- probe / decide / generate / analyse: `kit <stage> params/h200-sglang.yaml` (Qwen3-8B shape);
- decide32: `kit decide` on the Qwen3-32B shape, same ladder;
- eagle: `kit decide` with EAGLE-3 over a shape-only draft head (k = 1, 3), the arms' servers side by
  side on the GPU (`decide.servers: together`, each with its own KV cache) for three rounds;
- eagle_fi: the same with SGLang's flashinfer attention backend (is the per-sequence cost triton's?),
  CUDA graphs up to 128 sequences (flashinfer's workspace on Qwen3 is too small for 256);
- mtp27: `kit decide` on the Qwen3.6-27B shape, plain against MTP k=3 over its own random MTP layer
  (`H200_ADAPTIVE_K`: and SGLang's own adaptive MTP up to that k, `decide.adaptive_k`);
- moe: `kit decide` on Qwen3-30B-A3B's layer (16 of its 48 layers), plain against n-gram k = 1, 3;
- ceiling (`H200_CEILING_SHAPE=qwen3.6-27b`: on that shape): one SGLang server with stage 3's
  flags; `kit generate` against it (flavor external) interleaved with SGLang's own `bench_serving`
  on the same prompts and lengths, two rounds each;
  then `bench_offline_throughput` (no HTTP) on them; the kit's CPU seconds per 1,000 requests, and
  the largest `#running-req` SGLang logged against the capacity the kit read;
- defaults: `kit generate` against SGLang with stage 3's settings and against SGLang started with its
  own defaults (only the flags the box needs), the order A B B A over three server starts, four pairs
  of 400-prompt rounds (`H200_DEFAULTS_ROUNDS`) after an uncounted warm-up round per server: stage
  3's settings over the engine's, the median ratio with its range;
- faults: `kit generate` with the kit's own server, whose scheduler process is killed (-9) and whose
  HTTP process is then frozen (SIGSTOP) mid-run; every id once at the end;
- demo: the kit's demo model on SGLang (real text: its parsers, a real n-gram accept length);
- answers: the answers check on SGLang with the demo model (benchmarks/answers_check.py): n-gram
  k=`H200_ANSWERS_K` (default 3) against plain decoding, sampled, four answers per pilot prompt;
- backends: `kit decide` (Qwen3-8B shape, plain at 256) with `decide.backends`: SGLang's default
  sampler against the pytorch one at the run's own sampling, chosen by the decision (issue 45);
- forecast, forecast_run: issue 48's forecast judged on the GPU: `kit decide` on a 22,400-prompt
  plan (plain decoding, the engine capped at 512 running), then, in the next call, `kit generate`
  and `kit analyse` on it (summary.json's `forecast_check`);
- replicas: `engine.replicas: 2` sharing the one GPU (`replica_gpus: ["0", "0"]`, a KV cap each),
  a skewed mix of output lengths, one replica's scheduler killed mid-run (issue 35's one-GPU part).

Everything lands in $OUT: log.txt (every command, its return code and wall time), phases.json, and
one run-<name>.tar.xz per run folder (the tool brings back at most 8 files of 16 MiB).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the kit of this checkout, imported by the ceiling phase
PARAMS = REPO / "params" / "h200-sglang.yaml"
BUNDLE = REPO / ".device" / "sgl" / "site.tar.xz"
SITE = Path("/tmp/site")
OUTPUTS = REPO / "outputs"
SHAPES = REPO / ".cache" / "shapes"
DATA = REPO / ".cache" / "h200" / "data"
DEMO_MODEL = REPO / ".cache" / "demo" / "model"
DERIVED = REPO / "outputs" / "h200-params"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class Session:
    """The phases' shared state: where results go, what each phase did, the environment of the kit."""

    def __init__(self, out: Path, site: Path, engine_python: str | None, budget_s: float = 1e9) -> None:
        self.out, self.site = out, site
        self.deadline = time.monotonic() + budget_s
        self.engine_python = engine_python
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "log.txt", "a", buffering=1)
        self.phases: dict[str, dict] = {}
        self.env = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
        self.env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
        self.touched: set[str] = set()

    def say(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", flush=True)
        self.log.write(f"[{stamp}] {line}\n")

    def run(self, cmd: list[str], timeout: float, name: str, **kw) -> tuple[int, float, str]:
        """Run `cmd` with the kit's environment; (return code, seconds, the output's tail). The time
        limit is cut to what is left of the call's budget (--budget), so that results still land."""
        timeout = max(10.0, min(timeout, self.deadline - time.monotonic()))
        self.say(f"$ {' '.join(map(str, cmd))}  (limit {timeout:.0f} s)")
        t = time.monotonic()
        grace = kw.pop("interrupt_grace", None)
        try:
            if grace is not None:
                rc, text = interrupted_at(cmd, kw.pop("env", self.env), timeout, grace)
            else:
                p = subprocess.run(
                    cmd,
                    cwd=REPO,
                    env=kw.pop("env", self.env),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    **kw,
                )
                rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, text = 124, f"{e.stdout or ''}{e.stderr or ''} [timed out after {timeout:.0f} s]"
            text = text if isinstance(text, str) else text.decode(errors="replace")
        wall = time.monotonic() - t
        self.say(f"  -> rc {rc} in {wall:.1f} s; tail:\n{text[-2500:]}")
        return rc, wall, text

    def kit(self, stage: str, params: Path, timeout: float, *extra: str, **kw) -> dict:
        rc, wall, text = self.run(
            [sys.executable, "-m", "kit.cli", stage, str(params), *extra], timeout, stage, **kw
        )
        return {"rc": rc, "wall_s": round(wall, 1), "tail": text[-1500:]}

    def done(self, phase: str, result: dict) -> None:
        self.phases[phase] = result
        (self.out / "phases.json").write_text(json.dumps(self.phases, indent=1, default=str))
        for run in sorted(self.touched):
            pack_run(self.out, OUTPUTS / run)


def pack_run(out: Path, run_dir: Path) -> None:
    """run-<name>.tar.xz of a run folder (its generations included: shape-only text compresses)."""
    if run_dir.is_dir():
        with tarfile.open(out / f"run-{run_dir.name}.tar.xz", "w:xz") as tar:
            tar.add(run_dir, arcname=run_dir.name)


def derived(name: str, update: dict, base: Path = PARAMS) -> Path:
    """A params file beside the outputs: `base` with `update` merged in (paths kept absolute)."""
    p = yaml.safe_load(base.read_text())
    for s in p["data"]["sources"]:
        s["data_files"] = [str((base.parent / f).resolve()) for f in s["data_files"]]
    p["model"]["path"] = str((base.parent / p["model"]["path"]).resolve())
    p["output_dir"] = str(OUTPUTS)
    merge(p, update)
    DERIVED.mkdir(parents=True, exist_ok=True)
    path = DERIVED / f"{name}.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def plain_only(params: Path, *decide_keys: str) -> Path:
    """A derived params file without its speculative algorithm (the sweep skips its arms) and
    without `decide_keys` (settings `merge` can override but not remove)."""
    p = yaml.safe_load(params.read_text())
    p["engine"].pop("speculative", None)
    for key in decide_keys:
        p["decide"].pop(key, None)
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    return params


def merge(base: dict, over: dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v


def main_params(s: Session) -> Path:
    """params/h200-sglang.yaml as it is where its interpreter exists; else the same with this one."""
    override = engine_override(s)
    if not override:
        return PARAMS
    run = yaml.safe_load(PARAMS.read_text())["run"]
    return derived(run, {"run": run, **override})


# ---- phases -------------------------------------------------------------------------------------
def setup(s: Session) -> dict:
    r: dict = {}
    if not (s.site / "sglang").is_dir() and BUNDLE.is_file():
        t = time.monotonic()
        subprocess.run(["tar", "-xJf", str(BUNDLE), "-C", str(s.site.parent)], check=True)
        r["unpack_s"] = round(time.monotonic() - t, 1)
    patch_qwen2_5_vl(s.site)
    extra = REPO / ".device" / "extra"  # files a trimmed bundle lacked, laid over it
    if extra.is_dir():
        shutil.copytree(extra, s.site, dirs_exist_ok=True)
    for wheel in sorted((REPO / ".device" / "whl").glob("*.whl")):  # the kit's own needs the image lacks
        subprocess.run([sys.executable, "-m", "zipfile", "-e", str(wheel), str(s.site)], check=True)
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for n in ('sglang', 'sglang-kernel', 'flashinfer-python', 'torch', 'transformers',\n"
        "          'pydantic', 'datasets'):\n"
        "    try: out[n] = m.version(n)\n"
        "    except Exception as e: out[n] = None\n"
        "import kit.cli, datasets, pydantic\n"
        "print(json.dumps(out))\n"
    )
    rc, _, text = s.run([sys.executable, "-c", code], 120, "imports")
    r["imports_rc"], r["versions"] = rc, text.strip().splitlines()[-1] if rc == 0 else text[-800:]
    shapes = ("qwen3-8b", "qwen3-32b", "qwen3-8b-eagle3", "qwen3-30b-a3b", "qwen3.6-27b")
    for shape in os.environ.get("H200_SHAPES", ",".join(shapes)).split(","):  # 6-10 s each
        if not (SHAPES / shape / "config.json").is_file():
            s.run([sys.executable, "-m", "kit.cli", "model-shape", shape, str(SHAPES / shape)], 120, "shape")
    whole, cut = SHAPES / "qwen3-30b-a3b", SHAPES / f"qwen3-30b-a3b-l{MOE_LAYERS}"
    if whole.is_dir() and not (cut / "config.json").is_file():  # the same with fewer layers (marked)
        shutil.copytree(whole, cut, dirs_exist_ok=True)
        config = json.loads((cut / "config.json").read_text())
        config["num_hidden_layers"] = config["max_window_layers"] = MOE_LAYERS
        (cut / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if not (DATA / "hermes_fc.jsonl").is_file():
        code = f"from kit.demo.fixtures import write_fixtures; write_fixtures({str(DATA)!r}, 400)"
        s.run([sys.executable, "-c", code], 120, "fixtures")
    if shutil.which("nvidia-smi"):
        _, _, smi = s.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                           "--format=csv"], 30, "smi")  # fmt: skip
        r["gpu"] = smi.strip().splitlines()[-1:]
    return r


def stage(name: str, timeout: float):
    def phase(s: Session) -> dict:
        params = main_params(s)
        s.touched.add(yaml.safe_load(params.read_text())["run"])
        return s.kit(name, params, timeout)

    return phase


ROTARY_IMPORT = """from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VisionPatchEmbed,
    Qwen2_5_VisionRotaryEmbedding,
)
"""
ROTARY_SHIM = """from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionPatchEmbed

try:
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionRotaryEmbedding
except ImportError:  # transformers > 5.12 (the H200's 5.17) dropped it; 5.12.1's, for the kit's bundle

    class Qwen2_5_VisionRotaryEmbedding(torch.nn.Module):
        def __init__(self, dim: int, theta: float = 10000.0) -> None:
            super().__init__()
            inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, seqlen: int) -> torch.Tensor:
            seq = torch.arange(seqlen, device=self.inv_freq.device, dtype=self.inv_freq.dtype)
            return torch.outer(seq, self.inv_freq)
"""


def patch_qwen2_5_vl(site: Path) -> None:
    """SGLang 0.5.16 (pinned to transformers 5.12.1) imports `Qwen2_5_VisionRotaryEmbedding`, which the
    device's transformers 5.17 no longer has: every Qwen-VL family model (Qwen3.5 / 3.6 included, whose
    multimodal processor module imports it) then finds "No processor registered". Define it there."""
    path = site / "sglang" / "srt" / "models" / "qwen2_5_vl.py"
    if path.is_file() and ROTARY_IMPORT in (text := path.read_text()):
        path.write_text(text.replace(ROTARY_IMPORT, ROTARY_SHIM))


def decide32(s: Session) -> dict:
    run = "h200-sglang-qwen3-32b"
    s.touched.add(run)
    params = derived(run, {"run": run, "model": {"path": str(SHAPES / "qwen3-32b")}, **engine_override(s)})
    probe = s.kit("probe", params, 240)
    return {"probe": probe, "decide": s.kit("decide", params, 560)}


def eagle(s: Session, backend: str = "triton") -> dict:
    """`kit decide` with EAGLE-3 over a shape-only draft head (accept length ~1: the pure cost of
    speculating, k = 1 and 3) against plain, the three servers side by side on the GPU (each with its
    own KV cache, `decide.servers: together`): started in ~170 s, then two interleaved rounds of ~110 s
    fit the 400 s budget (the third session measured one, under 190 s). `backend` is SGLang's
    attention backend (eagle_fi: flashinfer, whose kernels nvcc compiles at the first start)."""
    run = "h200-sglang-eagle3" + ("" if backend == "triton" else f"-{backend}")
    s.touched.add(run)
    over = engine_override(s).get("engine", {})
    # flashinfer: SGLang 0.5.16 gives it a 512 MiB workspace on Qwen3, and the EAGLE verify graph for
    # 256 sequences needs 542 MiB (the fourth session's start failure): graphs up to 128 sequences
    extra = extra_args(over, *(["--cuda-graph-max-bs", "128"] if backend == "flashinfer" else []))
    params = derived(run, {
        "run": run,
        "engine": {**over, "attention_backend": backend, "extra_args": extra,
                   "speculative": {"algorithm": "EAGLE3",
                                   "draft_model_path": str(SHAPES / "qwen3-8b-eagle3")}},
        "decide": {"spec_steps": [1, 3], "servers": "together", "repetitions": 2, "time_budget_s": 400},
    })  # fmt: skip
    return {"decide": s.kit("decide", params, 520)}  # it probes first (probe.json in its folder)


def mtp27(s: Session) -> dict:
    """`kit decide` on the Qwen3.6-27B shape (the seed's model: 48 Gated DeltaNet and 16 full-attention
    layers, one MTP layer): plain against MTP k=3 (`--speculative-algorithm EAGLE` over the model's
    own MTP layer, topk 1, 4 draft tokens, the cookbook's setting), random weights, so accept length
    ~1: the pure cost of MTP on this architecture. 55 GB of weights: the servers run one at a time.
    H200_MTP_K="1,2,3" with H200_ROUNDS=2 is the whole case (issue 45): seven server starts of ~115 s
    and eight rounds of levels, about 22 minutes, more than one call holds, so the phase goes on
    from the sweep's journal (kit.decide.measure.journal) in the run folder it left, here or carried
    back in .device/runs/run-<run>.tar.xz (H200_MTP_K="1,3": five starts, about 16 minutes).
    `H200_TIME_BUDGET` (seconds) on the last call sets `decide.time_budget_s`: the sweep stops at the
    round that would overrun it and decides from the rounds measured (2026-12-06: round 0 of two).
    `H200_ADAPTIVE_K=3` sets `decide.adaptive_k`: SGLang's own adaptive MTP (up to k=3) is measured
    as one more arm (one more server start a round) and compared with the kit's pick per level
    (decision.json's `adaptive`); the run's name gains `-adaptive3`, a case of its own.
    `H200_DECIDE_LIMIT` (seconds): `kit decide`'s limit past one call's 600 s, for a run that
    outlives the device tool's calls (benchmarks/h200_detached.sh): no restart at a call's end."""
    backend = os.environ.get("H200_BACKEND")  # another attention backend than the params file's
    steps = [int(k) for k in os.environ.get("H200_MTP_K", "3").split(",")]
    rounds = int(os.environ.get("H200_ROUNDS", "1"))
    adaptive = int(os.environ["H200_ADAPTIVE_K"]) if os.environ.get("H200_ADAPTIVE_K") else None
    whole = steps != [3] or rounds > 1 or adaptive is not None
    tag = f"-mtp{''.join(map(str, steps))}-r{rounds}" if whole else ""
    tag += f"-adaptive{adaptive}" if adaptive else ""
    run = "h200-sglang-qwen3.6-27b" + (f"-{backend}" if backend else "") + tag
    s.touched.add(run)
    unpack_carried(run)
    # what the call's --budget leaves (the fifth session's last call had 230 s: cut before a level;
    # three starts here (plain 175 s the first time, its graphs' kernels compiled; MTP; plain again
    # for the end check), the levels and the check: ~520 s, so up to 560 when the call has it)
    # H200_DECIDE_LIMIT: a detached run (benchmarks/h200_detached.sh) is not held to one call's 600 s
    limit = float(os.environ.get("H200_DECIDE_LIMIT") or (560.0 if not whole else 600.0))
    budget = max(150.0, min(limit, s.deadline - time.monotonic() - 15))
    over = engine_override(s).get("engine", {})
    # no prefill graphs: their capture took 101 s of the fifth session's 169 s start, twice a sweep,
    # and both arms decode with their graphs as before (the sweep times decoding, not prefill)
    extra = extra_args(over, "--disable-prefill-cuda-graph")
    # the whole case runs to its end over calls (no time budget: the call's deadline interrupts it,
    # SIGINT, 45 s before, and the next call resumes); one round of k=3 keeps to one call as before
    # (and no pilot: it is the forecast's, and its sampled requests would pay FlashInfer's sampler
    # compile, ~87 s, in the middle of the sweep)
    limits = {"time_budget_s": round(budget - 80)} if not whole else {"pilot_per_source": 0}
    if os.environ.get("H200_TIME_BUDGET"):  # the last call of a whole case: the rounds that fit, decided
        limits["time_budget_s"] = float(os.environ["H200_TIME_BUDGET"])
    params = derived(run, {
        "run": run,
        "model": {"path": str(SHAPES / "qwen3.6-27b")},
        "engine": {**over, "extra_args": extra, "speculative": {"algorithm": "MTP"},
                   **({"attention_backend": backend} if backend else {})},
        "decide": {"spec_steps": steps, "repetitions": rounds, "crash_restarts": 1, **limits,
                   **({"adaptive_k": adaptive} if adaptive else {})},
    })  # fmt: skip
    out = {"decide": s.kit("decide", params, budget, interrupt_grace=45.0 if whole else None)}
    journal = OUTPUTS / run / "sweep_journal.jsonl"
    out["journal_lines"] = len(journal.read_text().splitlines()) - 1 if journal.is_file() else None
    out["decided"] = (OUTPUTS / run / "decision.json").is_file()
    return out


def unpack_carried(run: str) -> None:
    """The run folder as an earlier call returned it (.device/runs/run-<run>.tar.xz), where this
    machine has neither its decision nor a sweep to go on from: a fresh machine goes on from it."""
    carried = REPO / ".device" / "runs" / f"run-{run}.tar.xz"
    here = [OUTPUTS / run / name for name in ("decision.json", "sweep_journal.jsonl")]
    if not any(p.is_file() for p in here) and carried.is_file():
        with tarfile.open(carried) as tar:
            tar.extractall(OUTPUTS, filter="data")


def interrupted_at(cmd: list[str], env: dict, timeout: float, grace: float) -> tuple[int, str]:
    """Run `cmd` and, `grace` seconds before `timeout`, interrupt it as Ctrl-C does (SIGINT), so it
    stops cleanly and keeps what it finished; killed if it is still there at `timeout`."""
    with subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as p:
        try:
            out, _ = p.communicate(timeout=max(timeout - grace, 1.0))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            try:
                out, _ = p.communicate(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
        return p.returncode, out or ""


def backends(s: Session) -> dict:
    """Issue 45's sampler decided by stage 2 (`decide.backends`): `kit decide` on the Qwen3-8B shape,
    plain decoding alone at 256 concurrent (two rounds), then the settings sweep: SGLang's default
    sampler (flashinfer: the params set none) against `--sampling-backend pytorch`, at the run's own
    sampling (temperature 0.7, top-p 0.95, seed 0), ABBA over three server starts; decision.json's
    `backends` says what each cost and which stage 3 takes."""
    run = "h200-sglang-backends"
    s.touched.add(run)
    budget = max(150.0, min(560.0, s.deadline - time.monotonic() - 15))
    params = derived(run, {
        "run": run,
        **engine_override(s),
        "decide": {"concurrencies": [256], "repetitions": 2, "pilot_per_source": 0,
                   "backends": {"sampling_backend": ["pytorch"]}},
    })  # fmt: skip
    plain_only(params, "time_budget_s")  # plain decoding alone: the settings sweep is the point
    out = {"decide": s.kit("decide", params, budget, interrupt_grace=30.0)}
    with contextlib.suppress(OSError, ValueError):
        decision = json.loads((OUTPUTS / run / "decision.json").read_text())
        out["backends"] = decision.get("backends")
        out["engine_settings"] = decision.get("engine_settings")
    return out


FORECAST_ROWS = 4200
"""Fixture rows per source for the forecast phase: 22,400 prompts once deduplicated and filtered."""


FORECAST_RUN = "h200-sglang-forecast-22k"


def forecast_params(s: Session) -> Path:
    """The forecast phases' params: 22,400 prompts of the six sources (Qwen3-8B shape); plain decoding
    alone (n-gram lost at every level above 16 on this shape); the engine capped at 512 running (a
    user's own cap, kept by stage 3), so that the sweep's top level is stage 3's batch; 64 output
    tokens a request (random weights: nearly every answer runs to its budget), so that stage 3 ends
    inside one call."""
    data = REPO / ".cache" / "h200" / "data-22k"
    if not (data / "hermes_fc.jsonl").is_file():
        code = f"from kit.demo.fixtures import write_fixtures; write_fixtures({str(data)!r}, {FORECAST_ROWS})"
        s.run([sys.executable, "-c", code], 120, "fixtures")
    s.touched.add(FORECAST_RUN)
    over = engine_override(s).get("engine", {})
    base = yaml.safe_load(PARAMS.read_text())
    sources = [{**src, "data_files": [str(data / f"{src['name']}.jsonl")], "count": FORECAST_ROWS}
               for src in base["data"]["sources"]]  # fmt: skip
    params = derived(FORECAST_RUN, {
        "run": FORECAST_RUN,
        "engine": {**over, "max_running_requests": 512},
        "decide": {"concurrencies": [64, 256, 512], "num_prompts": 1024, "spec_steps": [1],
                   "repetitions": 2, "time_budget_s": 150},
        "data": {"sources": sources},
        "generate": {"sampling": {"max_tokens": 64, "temperature": 0.7, "top_p": 0.95, "seed": 0}},
    })  # fmt: skip
    return plain_only(params)


def forecast(s: Session) -> dict:
    """Issue 48 on the GPU, first call: `kit decide` on the 22,400-prompt plan, whose decision.json
    holds the forecast of stage 3 (`forecast_params`)."""
    out = {"decide": s.kit("decide", forecast_params(s), 420)}
    with contextlib.suppress(OSError, ValueError):
        out["forecast"] = json.loads((OUTPUTS / FORECAST_RUN / "decision.json").read_text()).get("forecast")
    return out


def forecast_run(s: Session) -> dict:
    """Issue 48 on the GPU, second call: stage 3 on the plan the forecast phase decided, then stage 4,
    which sets the forecast against what the run took (summary.json's `forecast_check`). A machine
    given back between the calls: the run folder comes back from its tarball, carried in
    .device/runs/ (run-h200-sglang-forecast-22k.tar.xz, as the first call returned it)."""
    params = forecast_params(s)
    unpack_carried(FORECAST_RUN)
    out = {"generate": s.kit("generate", params, 480)}
    out["analyse"] = s.kit("analyse", params, 150)
    with contextlib.suppress(OSError, ValueError):
        out["forecast_check"] = json.loads((OUTPUTS / FORECAST_RUN / "summary.json").read_text()).get(
            "forecast_check"
        )
    return out


MOE_LAYERS = 16  # of Qwen3-30B-A3B's 48: the same layer, a third of the weights, so three servers fit


def moe(s: Session) -> dict:
    """`kit decide` on a Qwen3-30B-A3B shape cut to MOE_LAYERS layers (every layer as published: 128
    experts, 8 per token): plain against n-gram k = 1 and 3, whose verify step runs 2 and 4 tokens
    per sequence through the experts (random weights: accept length ~1, so the step SGLang logs is
    the pure verify cost, issue 32's MoE term). Three servers side by side, two rounds in 400 s."""
    run = "h200-sglang-qwen3-30b-a3b"
    s.touched.add(run)
    over = engine_override(s).get("engine", {})
    params = derived(run, {
        "run": run,
        "model": {"path": str(SHAPES / f"qwen3-30b-a3b-l{MOE_LAYERS}")},
        "engine": {**over, "speculative": {"algorithm": "NGRAM"}},
        "decide": {"spec_steps": [1, 3], "servers": "together", "repetitions": 2, "time_budget_s": 400},
    })  # fmt: skip
    return {"decide": s.kit("decide", params, 520)}


def extra_args(over: dict, *more: str) -> list[str]:
    """The engine's extra_args (the override's, else the params file's) with `more` after them."""
    return [*over.get("extra_args", yaml.safe_load(PARAMS.read_text())["engine"]["extra_args"]), *more]


def engine_override(s: Session) -> dict:
    """{} where the params file's interpreter exists; else its engine on this one (a dry run)."""
    p = yaml.safe_load(PARAMS.read_text())
    if Path(p["engine"]["python"]).exists() and not s.engine_python:
        return {}
    env = {**p["engine"]["env"], "PYTHONPATH": str(s.site)}
    return {"engine": {"python": s.engine_python or sys.executable, "env": env}}


def ceiling(s: Session) -> dict:
    """Stage 3 against SGLang's own client and its offline engine, like for like (issue 45): one server
    with stage 3's flags; the same prompts as the kit renders them (its messages and tools, sent as
    such by bench_serving's `openai` dataset; the chat template applied once for the offline engine,
    which takes text); the same sampling (the params' temperature and top-p, EOS respected: the
    kit's requests never set ignore_eos); the prefix cache flushed before every run; the kit and
    bench_serving interleaved (ABBA), after one warm-up run that pays the sampler's first-use compile.
    The offline engine starts cold (a new engine, an empty cache) with the same flags and sampling.
    `H200_CEILING_SHAPE=qwen3.6-27b` runs it on the 27B shape (`ceiling_params`), with
    `H200_CEILING_LIMIT` prompts a run (default 1,000) and `H200_CEILING_ROUNDS` rounds (default 2);
    `H200_CEILING_WARMUP`: the warm-up's prompts (default 300; on a fresh machine the 27B shape's
    warm-up of 300 took 304 s, 2026-12-08)."""
    rounds = int(os.environ.get("H200_CEILING_ROUNDS", "2"))
    limit = int(os.environ.get("H200_CEILING_LIMIT", "1000"))
    base, params, cmd, env = stage3_server(s)
    where = OUTPUTS / "h200-ceiling"
    where.mkdir(parents=True, exist_ok=True)
    s.touched.add("h200-ceiling")
    s.say(f"server: {' '.join(cmd)}")
    body = request_body(base)
    requests_file, rendered = export_prompts(base, limit, where, body)
    r: dict = {"server_cmd": cmd, "sampling": body, "runs": []}
    with served(cmd, env, where / "server.log") as (port, ready_s):
        r["ready_s"] = ready_s
        r["server_info"] = get_json(port, "/server_info")
        warm = min(int(os.environ.get("H200_CEILING_WARMUP", "300")), limit)
        r["warmup"] = bench_serving(s, base, port, requests_file, warm, "warmup")
        in_flight = None  # the kit's: bench_serving holds as many (its default streams, the kit's does not)
        for i in range(rounds):
            for who in ("kit", "bench") if i % 2 == 0 else ("bench", "kit"):
                flush_cache(port)
                if who == "kit":
                    run = kit_round(s, port, i, limit)
                    in_flight = (run.get("manifest") or {}).get("concurrency") or in_flight
                else:
                    run = bench_serving(s, base, port, requests_file, limit, i, in_flight)
                r["runs"].append({"round": i, "who": who, **run})
        r["running_req_max"] = running_req_max(where / "server.log")
    native = {k: v for k, v in body.items() if k in NATIVE_SAMPLING}
    native.update({"sampling_seed": body["seed"]} if "seed" in body else {})
    r["offline"] = offline(s, params, rendered, limit, native)
    r["summary"] = ceiling_summary(r)
    return r


def stage3_server(s: Session):
    """The params, the plain arm's params, and the server command and environment stage 3 starts."""
    from kit.engines.flavors import flavor, server_command, server_env
    from kit.engines.launcher import adapt_flags, discover
    from kit.engines.settings import Arm, arm_engine
    from kit.params import load_params

    base = load_params(ceiling_params(s))
    params = base.model_copy(update={"engine": arm_engine(base, Arm(0), hybrid=False)})
    env = {**s.env, **server_env(params)}
    launcher = discover(params.engine_python, flavor(params.engine.flavor), env=env)
    cmd, _ = adapt_flags(server_command(params, 31000), launcher)  # as stage 3 starts it
    return base, params, cmd, env


@contextlib.contextmanager
def served(cmd: list[str], env: dict, log: Path, timeout: float = 600):
    """A server started from `cmd` (its output appended to `log`), ready: yields (port, seconds to
    ready); stopped on the way out, whatever happened inside."""
    port = int(cmd[cmd.index("--port") + 1])
    log.parent.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        cmd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        yield port, wait_ready(port, timeout, alive=lambda: server.poll() is None)
    finally:
        stop(server)


NATIVE_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "stop")  # fmt: skip
"""The request fields SGLang's offline engine takes under the same names (the seed: sampling_seed)."""


def request_body(params) -> dict:
    """The fields the kit's stage 3 sends with every request (kit.engines.request_fields, and the
    seed the loop adds per sample when the params set one)."""
    from kit.engines.request_fields import run_request_fields

    body = run_request_fields(params)
    if params.generate.sampling.seed is not None:
        body["seed"] = params.generate.sampling.seed
    return body


RUNS_AT_ALL = ("--model-path", "--host", "--port", "--load-format", "--attention-backend")
"""The flags of stage 3's command an engine started with its own defaults keeps: the model, where it
listens, dummy weights (a shape-only model) and the attention backend the bundle can run (it leaves
out FA3, SGLang's default on Hopper)."""


def defaults_command(cmd: list[str]) -> list[str]:
    """Stage 3's server command cut to what the engine needs to run here at all (RUNS_AT_ALL)."""
    at = cmd.index("--model-path")
    kept = cmd[:at]
    for i in range(at, len(cmd)):  # every flag kept is followed by its value
        if cmd[i] in RUNS_AT_ALL:
            kept += cmd[i : i + 2]
    return kept


SERVER_INFO = ("max_running_requests", "max_total_num_tokens", "sampling_backend", "cuda_graph_max_bs",
               "mem_fraction_static", "chunked_prefill_size", "attention_backend")  # fmt: skip


def defaults(s: Session, limit: int = 400) -> dict:
    """`kit generate` against SGLang started with stage 3's settings (A) and with its own defaults (B,
    `defaults_command`), the same model, prompts and sampling, cache flushed before each round, in
    the order A B B A over three server starts (the two servers cannot share the GPU without changing
    the memory each one plans with), so that a drift over the phase falls on both alike (issue 45:
    stage 3's settings against the engine's own). Each server first answers a warm-up round (the
    sampler's first-use compile, the graphs' first replays) that is not counted. `H200_DEFAULTS_ROUNDS`
    pairs (default 4: 8 rounds of `limit` prompts; 2026-12-06's two pairs of 600 could not put an
    interval on the ratio): the first server start runs the first half of A's rounds, B runs all of
    its own, the last A start the rest; the summary's ratio is the median of the pairs', with their
    range."""
    _, _, cmd, env = stage3_server(s)
    arms = {"settings": cmd, "defaults": defaults_command(cmd)}
    pairs = int(os.environ.get("H200_DEFAULTS_ROUNDS", "4"))
    first, rest = list(range(pairs // 2)), list(range(pairs // 2, pairs))
    where = OUTPUTS / "h200-defaults"
    s.touched.add("h200-defaults")
    r: dict = {"server_cmd": arms, "runs": [], "servers": []}
    for who, rounds in (("settings", first), ("defaults", list(range(pairs))), ("settings", rest)):
        s.say(f"{who} server: {' '.join(arms[who])}")
        try:
            with served(arms[who], env, where / f"server-{who}.log") as (port, ready_s):
                info = get_json(port, "/server_info") or {}
                r["servers"].append({"who": who, "ready_s": ready_s, **{k: info.get(k) for k in SERVER_INFO}})
                flush_cache(port)
                kit_round(s, port, 0, min(150, limit), f"{who}-warmup")
                for i in rounds:
                    flush_cache(port)
                    r["runs"].append({"round": i, "who": who, **kit_round(s, port, i, limit, who)})
        except (RuntimeError, TimeoutError) as e:
            r["servers"].append({"who": who, "error": str(e)})
    tok_s = {(x["who"], x["round"]): x.get("output_tok_s") for x in r["runs"]}
    ratios = {
        i: round(a / b, 3) for i in range(pairs)
        if (a := tok_s.get(("settings", i))) and (b := tok_s.get(("defaults", i)))
    }  # fmt: skip
    r["summary"] = {
        "settings": {i: tok_s.get(("settings", i)) for i in range(pairs)},
        "defaults": {i: tok_s.get(("defaults", i)) for i in range(pairs)},
        "settings_over_defaults": ratios,
        "ratio_median": statistics.median(ratios.values()) if ratios else None,
        "ratio_range": [min(ratios.values()), max(ratios.values())] if ratios else None,
    }
    return r


def ceiling_summary(r: dict) -> dict:
    """Output tok/s of each run and the kit's ratios to bench_serving (same round) and offline."""
    kit = {x["round"]: x.get("output_tok_s") for x in r["runs"] if x["who"] == "kit"}
    bench = {x["round"]: x.get("output_tok_s") for x in r["runs"] if x["who"] == "bench"}
    offline = ((r.get("offline") or {}).get("result") or {}).get("output_throughput")
    out: dict = {"kit": kit, "bench_serving": bench, "offline": offline}
    out["kit_over_bench"] = {i: round(k / bench[i], 3) for i, k in kit.items() if k and bench.get(i)}
    out["kit_over_offline"] = {i: round(k / offline, 3) for i, k in kit.items() if k and offline}
    return out


def flush_cache(port: int) -> None:
    """SGLang's POST /flush_cache: every run starts with an empty prefix cache."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", data=b"", method="POST")
    with contextlib.suppress(Exception), urllib.request.urlopen(req, timeout=30):
        pass


def ceiling_params(s: Session) -> Path:
    """The ceiling's params: the main params file, or with `H200_CEILING_SHAPE` that shape with what
    its decision ran (the 27B shape: flashinfer attention, no prefill graphs, the plain arm's cap of 80
    running on an 80 GB card, `kit.decide.sweep.layout.running_caps` on 2026-12-06)."""
    shape = os.environ.get("H200_CEILING_SHAPE")
    if not shape:
        return main_params(s)
    over = engine_override(s).get("engine", {})
    cap = int(os.environ.get("H200_CEILING_RUNNING", "80"))
    return derived(f"h200-ceiling-{shape}", {
        "run": f"h200-ceiling-{shape}",
        "model": {"path": str(SHAPES / shape)},
        "engine": {**over, "attention_backend": "flashinfer", "max_running_requests": cap,
                   "extra_args": extra_args(over, "--disable-prefill-cuda-graph")},
    })  # fmt: skip


def kit_round(s: Session, port: int, i: int, limit: int, tag: str = "kit") -> dict:
    """`kit generate` (flavor external) on the server; output tok/s over its generating time."""
    import pyarrow.parquet as pq

    run = f"h200-ceiling-{tag}-{i}"
    s.touched.add(run)
    shutil.rmtree(OUTPUTS / run, ignore_errors=True)
    params = derived(run, {
        "run": run,
        "engine": {"flavor": "external", "base_url": f"http://127.0.0.1:{port}"},
        "generate": {"limit": limit, "use_decision": False, "order": "plan"},
    }, base=ceiling_params(s))  # fmt: skip
    t0 = os.times()
    kit = s.kit("generate", params, 400)
    t1 = os.times()
    kit["cpu_s"] = round((t1.children_user - t0.children_user) + (t1.children_system - t0.children_system), 2)
    manifest = OUTPUTS / run / "manifest.json"
    kit["manifest"] = json.loads(manifest.read_text()) if manifest.is_file() else None
    parts = sorted((OUTPUTS / run / "generations").glob("part-*.parquet"))
    tokens = sum(
        sum(v or 0 for v in pq.read_table(f, columns=["completion_tokens"]).column(0).to_pylist())
        for f in parts
    )
    seconds = (kit["manifest"] or {}).get("generating_s")
    kit["output_tokens"] = tokens
    kit["output_tok_s"] = round(tokens / seconds, 1) if seconds else None
    return kit


def bench_serving(
    s: Session, base, port: int, requests_file: Path, limit: int, i, in_flight: int | None = None
) -> dict:
    """SGLang's own client on the same requests (its `openai` dataset: messages, tools, sampling as
    the kit sends them), EOS respected, in the kit's traffic shape: whole answers, not a stream of
    every token (on the H200 its default streaming took SGLang from 15.0K to 9.2-9.7K tok/s, 23 ms a
    token against the offline engine's 13.5 ms a step), and as many in flight as the kit held
    (`in_flight`; else the engine's capacity)."""
    out = OUTPUTS / "h200-ceiling" / f"bench_serving-{i}.jsonl"
    info = get_json(port, "/server_info") or {}
    capacity = in_flight or info.get("max_running_requests") or 256
    rc, wall, text = s.run([
        sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang-oai-chat",
        "--base-url", f"http://127.0.0.1:{port}", "--dataset-name", "openai",
        "--dataset-path", str(requests_file), "--num-prompts", str(limit),
        "--max-concurrency", str(capacity), "--disable-ignore-eos", "--tokenizer", str(base.model.path),
        "--output-file", str(out), "--disable-tqdm", "--disable-stream",
    ], 400, "bench_serving")  # fmt: skip
    result = json.loads(out.read_text().splitlines()[-1]) if out.is_file() else None
    tok_s = (result or {}).get("output_throughput")
    return {"rc": rc, "wall_s": round(wall, 1), "output_tok_s": tok_s, "result": result, "tail": text[-1500:]}


def offline(s: Session, params, rendered: Path, limit: int, body: dict) -> dict:
    """`bench_offline_throughput`: SGLang's engine in-process (no HTTP), cold, the same flags, the
    prompts as the server renders them, the same sampling, EOS respected."""
    eng = params.engine
    result = OUTPUTS / "h200-ceiling" / "bench_offline.jsonl"
    cmd = [
        sys.executable, "-m", "sglang.bench_offline_throughput", "--model-path", str(params.model.path),
        "--load-format", "dummy", "--attention-backend", str(eng.attention_backend),
        "--mem-fraction-static", str(eng.mem_fraction_static),
        *(["--max-running-requests", str(eng.max_running_requests)] if eng.max_running_requests else []),
        "--context-length", str(eng.context_length),
        "--dataset-name", "sharegpt", "--dataset-path", str(rendered), "--num-prompts", str(limit),
        "--sharegpt-output-len", str(params.generate.sampling.max_tokens), "--disable-ignore-eos",
        "--extra-request-body", json.dumps(body), "--result-filename", str(result), *eng.extra_args,
    ]  # fmt: skip
    rc, wall, text = s.run(cmd, 400, "bench_offline")
    res = json.loads(result.read_text().splitlines()[-1]) if result.is_file() else None
    return {"rc": rc, "wall_s": round(wall, 1), "result": res, "tail": text[-1500:]}


def export_prompts(params, limit: int, where: Path, body: dict) -> tuple[Path, Path]:
    """The plan's first `limit` prompts: as the kit's requests (OpenAI JSONL: messages, tools, max_tokens
    and sampling, for bench_serving's `openai` dataset), and rendered by the model's chat template as
    the server renders them (ShareGPT, for the offline engine, which takes text)."""
    import pandas as pd
    from transformers import AutoTokenizer

    from kit.prompts.plan import build_plan

    tok = AutoTokenizer.from_pretrained(str(params.model.path))
    planned = where / "plan"
    if not (planned / "prompts.parquet").is_file():  # the plan stage 3 makes from the same params
        planned.mkdir(parents=True, exist_ok=True)
        build_plan(params.data, Path(params.model.path), planned / "prompts.parquet", planned / "plan.json")
    plan = pd.read_parquet(planned / "prompts.parquet").head(limit)
    requests, rendered = [], []
    for row in plan.to_dict("records"):
        msgs = json.loads(row["messages"]) if isinstance(row["messages"], str) else list(row["messages"])
        tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) and row["tools"] else None
        req = {"messages": msgs, "max_tokens": params.generate.sampling.max_tokens, **body}
        if tools:
            req["tools"] = tools
        requests.append(json.dumps(req))
        kwargs = body.get("chat_template_kwargs") or {}
        text = tok.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs
        )
        rendered.append(
            {"conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "ok ok"}]}
        )
    requests_file, rendered_file = where / "requests.openai.jsonl", where / "prompts.rendered.sharegpt.json"
    requests_file.write_text("\n".join(requests) + "\n")
    rendered_file.write_text(json.dumps(rendered))
    return requests_file, rendered_file


def faults(s: Session, limit: int = 1200) -> dict:
    """kill -9 of the scheduler, then SIGSTOP of the HTTP server, during one `kit generate`."""
    import psutil

    run = "h200-faults"
    s.touched.add(run)
    shutil.rmtree(OUTPUTS / run, ignore_errors=True)
    params = derived(run, {
        "run": run,
        "engine": {**engine_override(s).get("engine", {}), "speculative": {"algorithm": None}},
        "generate": {"limit": limit, "use_decision": False, "shard_seconds": 5, "hang_timeout_s": 30},
    })  # fmt: skip
    events: list[dict] = []
    t0 = time.monotonic()

    def event(what: str, **kw) -> None:
        events.append({"t_s": round(time.monotonic() - t0, 1), "what": what, **kw})
        s.say(f"fault: {what} {kw}")

    cmd = [sys.executable, "-m", "kit.cli", "generate", str(params)]
    out = open(OUTPUTS / f"{run}.kit.log", "w")
    kit = subprocess.Popen(cmd, cwd=REPO, env=s.env, stdout=out, stderr=subprocess.STDOUT)

    def alive() -> bool:
        return kit.poll() is None

    def new_server(old: int):
        return lambda: (lambda p: p if p and p.pid != old else None)(sglang_server(psutil, kit.pid))

    log = OUTPUTS / run / "logs" / "server-0.log"

    def decoding(seen: int):
        """True once the server logged a decode batch after `seen` of them, or rows landed: mid-run.
        (Rows alone do not say it: at SGLang's capacity every request is in flight at once and all
        of them finish together, so nothing lands on disk until the run is over.)"""
        return lambda: decode_lines(log) > seen or (seen == 0 and rows_on_disk(OUTPUTS / run) > 0)

    try:
        server = wait_for(lambda: sglang_server(psutil, kit.pid), 600, alive=alive)
        event("server up", pid=server.pid)
        wait_for(decoding(0), 600, every=0.5, alive=alive)
        time.sleep(2)
        server = sglang_server(psutil, kit.pid) or server
        sched = [
            c for c in server.children(recursive=True) if "scheduler" in " ".join(c.cmdline() + [c.name()])
        ]
        victim = sched[0] if sched else server
        event(
            "kill -9",
            pid=victim.pid,
            process=" ".join(victim.cmdline())[:80],
            rows=rows_on_disk(OUTPUTS / run),
            decode_lines=decode_lines(log),
        )
        victim.send_signal(signal.SIGKILL)
        again = wait_for(new_server(server.pid), 400, alive=alive)
        event("server restarted", pid=again.pid)
        seen = decode_lines(log)
        wait_for(decoding(seen), 600, every=0.5, alive=alive)
        time.sleep(2)
        event("SIGSTOP", pid=again.pid, rows=rows_on_disk(OUTPUTS / run), decode_lines=decode_lines(log))
        again.send_signal(signal.SIGSTOP)
        third = wait_for(new_server(again.pid), 400, alive=alive)
        event("server restarted", pid=third.pid)
        rc = kit.wait(timeout=600)
        event("kit generate exited", rc=rc)
    except Exception as e:  # a benchmark reports what it saw
        event("error", error=repr(e))
        kit.kill()
        rc = None
    out.close()
    shutil.copy(OUTPUTS / f"{run}.kit.log", OUTPUTS / run / "kit.log") if (OUTPUTS / run).is_dir() else None
    ids = ids_on_disk(OUTPUTS / run)
    return {"rc": rc, "events": events, "rows": len(ids), "unique_ids": len(set(ids)), "limit": limit}


def replicas(s: Session, limit: int = 2400) -> dict:
    """Issue 35's one-GPU part: `engine.replicas: 2` on the one H200 (`replica_gpus: ["0", "0"]`,
    each with its own KV cache), a skewed mix of output lengths, and one replica's scheduler killed
    (-9) mid-run: the other keeps going, every id once; requests per replica from their logs."""
    import psutil

    run = "h200-replicas"
    s.touched.add(run)
    shutil.rmtree(OUTPUTS / run, ignore_errors=True)
    over = engine_override(s).get("engine", {})
    lengths = {"infinity_instruct": 512, "webinstructsub": 64, "codefeedback": 384, "metamathqa": 64,
               "hermes_fc": 32, "agentinstruct": 256}  # fmt: skip
    p = yaml.safe_load(PARAMS.read_text())
    sources = [
        dict(src, max_tokens=lengths[src["name"]],
             data_files=[str((PARAMS.parent / f).resolve()) for f in src["data_files"]])
        for src in p["data"]["sources"]
    ]  # fmt: skip
    params = derived(run, {
        "run": run,
        "engine": {**over, "speculative": {"algorithm": None}, "replicas": 2, "replica_gpus": ["0", "0"],
                   "extra_args": [*p["engine"]["extra_args"], "--max-total-tokens", "300000"]},
        "data": {"sources": sources},
        "generate": {"limit": limit, "use_decision": False, "shard_seconds": 5, "hang_timeout_s": 30},
    })  # fmt: skip
    events: list[dict] = []
    t0 = time.monotonic()
    out = open(OUTPUTS / f"{run}.kit.log", "w")
    kit = subprocess.Popen([sys.executable, "-m", "kit.cli", "generate", str(params)], cwd=REPO, env=s.env,
                           stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    log1 = OUTPUTS / run / "logs" / "server-1.log"
    try:
        wait_for(lambda: decode_lines(log1) > 0 or rows_on_disk(OUTPUTS / run) > 0, 600, every=0.5,
                 alive=lambda: kit.poll() is None)  # fmt: skip
        servers = [p for p in psutil.Process(kit.pid).children(recursive=True) if _is_server(p)]
        victim = servers[-1]  # either: each replica's log says what it served
        sched = [
            c for c in victim.children(recursive=True) if "scheduler" in " ".join(c.cmdline() + [c.name()])
        ]
        target = sched[0] if sched else victim
        events.append({"t_s": round(time.monotonic() - t0, 1), "what": "kill -9", "pid": target.pid,
                       "rows": rows_on_disk(OUTPUTS / run)})  # fmt: skip
        s.say(f"replicas: kill -9 {target.pid}")
        target.send_signal(signal.SIGKILL)
        rc = kit.wait(timeout=max(30.0, s.deadline - time.monotonic() - 20))
    except Exception as e:  # a benchmark reports what it saw
        events.append({"what": "error", "error": repr(e)})
        kit.kill()
        rc = None
    out.close()
    ids = ids_on_disk(OUTPUTS / run)
    logs = {i: OUTPUTS / run / "logs" / f"server-{i}.log" for i in (0, 1)}
    served = {
        f"server-{i}": f.read_text(errors="replace").count("POST /v1/chat")
        for i, f in logs.items()
        if f.is_file()
    }
    manifest = OUTPUTS / run / "manifest.json"
    return {"rc": rc, "events": events, "rows": len(ids), "unique_ids": len(set(ids)), "limit": limit,
            "requests_per_server": served,
            "manifest": json.loads(manifest.read_text()) if manifest.is_file() else None}  # fmt: skip


def _is_server(p) -> bool:
    """An SGLang launcher process that serves (the kit reads the launcher's `--help` first)."""
    try:
        argv = p.cmdline()
    except Exception:
        return False
    return len(argv) > 2 and argv[1:3] == ["-m", "sglang.launch_server"] and "--help" not in argv


def demo(s: Session) -> dict:
    """The demo model on SGLang: its parsers on real answers, a real n-gram accept length.
    `H200_DEMO_CAP=1`: a job capped at that many running requests (`engine.max_running_requests`, the
    sweep's levels up to it), where n-gram leads on this model (1.32x at 1 concurrent, 2026-12-02), so
    that the decision's own answers check compares it with plain decoding; `H200_DEMO_STAGES`: the
    stages run (default decide,generate,analyse)."""
    cap = int(os.environ.get("H200_DEMO_CAP", "0")) or None
    run = f"h200-sglang-demo-cap{cap}" if cap else "h200-sglang-demo"
    s.touched.add(run)
    counts = {"infinity_instruct": 40, "webinstructsub": 40, "codefeedback": 40, "metamathqa": 40,
              "hermes_fc": 40, "agentinstruct": 20}  # fmt: skip
    p = yaml.safe_load(PARAMS.read_text())
    sources = [  # absolute: the derived file lives elsewhere (outputs/h200-params/)
        dict(
            src,
            count=counts[src["name"]],
            data_files=[str((PARAMS.parent / f).resolve()) for f in src["data_files"]],
        )
        for src in p["data"]["sources"]
    ]
    params = derived(run, {
        "run": run, "model": {"path": str(DEMO_MODEL)},
        "engine": {**engine_override(s).get("engine", {}), "context_length": 2048,
                   "mem_fraction_static": 0.5, "max_running_requests": cap},
        "probe": {"context_length": 2048},
        "decide": {"concurrencies": [c for c in (1, 16, 64) if c <= (cap or 64)], "num_prompts": 64,
                   "max_tokens": 96, "spec_steps": [3], "repetitions": 2, "level_s": 4, "time_budget_s": 240},
        "data": {"max_prompt_tokens": 1536, "sources": sources},
        "generate": {"sampling": {"max_tokens": 192, "temperature": 0.7, "top_p": 0.95, "seed": 0}},
    })  # fmt: skip
    stages = os.environ.get("H200_DEMO_STAGES", "decide,generate,analyse").split(",")
    limits = {"decide": 480, "generate": 240, "analyse": 120}  # decide: the answers check's two starts too
    return {stage_: s.kit(stage_, params, limits[stage_]) for stage_ in stages}


def answers(s: Session) -> dict:
    """The answers check (kit.decide.checks.answers) on SGLang: the demo model's pilot prompts answered
    four times each by plain decoding and by n-gram k=`H200_ANSWERS_K` (default 3), at temperature
    0.7 / top-p 0.95, compared. Does SGLang's speculation sample as plain decoding does? (vLLM 0.32's
    CPU build does not: docs/decision.md.) `H200_ANSWERS_SAMPLER=pytorch`: that sampler, without the
    default's first-use compile; `H200_ANSWERS_PER_SOURCE`: pilot prompts per source (default 8).
    Needs .cache/demo carried."""
    run = "h200-sglang-answers"
    s.touched.add(run)
    k = int(os.environ.get("H200_ANSWERS_K", "3"))
    p = yaml.safe_load(PARAMS.read_text())
    sources = [
        dict(src, count=40, data_files=[str((PARAMS.parent / f).resolve()) for f in src["data_files"]])
        for src in p["data"]["sources"]
    ]
    params = derived(run, {
        "run": run, "model": {"path": str(DEMO_MODEL)},
        "engine": {**engine_override(s).get("engine", {}), "context_length": 2048,
                   "mem_fraction_static": 0.5, "sampling_backend": os.environ.get("H200_ANSWERS_SAMPLER")},
        "probe": {"context_length": 2048},
        "decide": {"concurrencies": [1, 64], "spec_steps": [k],
                   "pilot_per_source": int(os.environ.get("H200_ANSWERS_PER_SOURCE", "8"))},
        "data": {"max_prompt_tokens": 1536, "sources": sources},
        "generate": {"sampling": {"max_tokens": 192, "temperature": 0.7, "top_p": 0.95}},
    })  # fmt: skip
    out = OUTPUTS / run / "answers_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rc, wall, text = s.run(
        [sys.executable, str(REPO / "benchmarks" / "answers_check.py"), str(params), "--arm", f"spec_k{k}",
         "--out", str(out)], 420, "answers_check",
    )  # fmt: skip
    result = json.loads(out.read_text()) if out.is_file() else None
    return {"rc": rc, "wall_s": round(wall, 1), "result": result, "tail": text[-3000:]}


PHASES = {
    "setup": setup,
    "answers": answers,
    "probe": stage("probe", 240),
    "decide": stage("decide", 540),
    "generate": stage("generate", 400),
    "analyse": stage("analyse", 180),
    "decide32": decide32,
    "eagle": eagle,
    "eagle_fi": lambda s: eagle(s, "flashinfer"),
    "moe": moe,
    "mtp27": mtp27,
    "forecast": forecast,
    "backends": backends,
    "forecast_run": forecast_run,
    "ceiling": ceiling,
    "defaults": defaults,
    "faults": faults,
    "demo": demo,
    "replicas": replicas,
}


# ---- helpers ------------------------------------------------------------------------------------
def wait_ready(port: int, timeout: float, alive=None) -> float:
    t = time.monotonic()
    wait_for(lambda: get_json(port, "/health", raw=True), timeout, alive=alive)
    return round(time.monotonic() - t, 1)


def get_json(port: int, path: str, raw: bool = False):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            body = r.read()
            return True if raw else json.loads(body)
    except Exception:
        return None


def wait_for(probe, timeout: float, every: float = 1.0, alive=None):
    """The first true answer of `probe()` within `timeout` s; `alive()` false stops the wait early."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        if alive is not None and not alive():
            raise RuntimeError("the process watched has exited")
        time.sleep(every)
    raise TimeoutError(f"nothing after {timeout:.0f} s")


def sglang_server(psutil, kit_pid: int):
    """The SGLang HTTP process among the descendants of `kit generate` (not its reaper)."""
    try:
        kids = psutil.Process(kit_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for p in kids:
        try:
            if _is_server(p) and p.status() != psutil.STATUS_STOPPED:
                return p
        except psutil.Error:
            continue
    return None


def decode_lines(log: Path) -> int:
    """SGLang's "Decode batch" log lines so far (it writes one every 40 decode steps)."""
    try:
        return log.read_text(errors="replace").count("Decode batch")
    except OSError:
        return 0


def rows_on_disk(run_dir: Path) -> int:
    return len(ids_on_disk(run_dir))


def ids_on_disk(run_dir: Path) -> list[str]:
    import pyarrow.parquet as pq

    ids: list[str] = []
    for f in sorted((run_dir / "generations").glob("part-*.parquet")):
        try:
            ids += pq.read_table(f, columns=["id"]).column("id").to_pylist()
        except Exception:
            continue
    return ids


def running_req_max(log: Path) -> int | None:
    found = [int(m) for m in re.findall(r"#running-req: (\d+)", log.read_text(errors="replace"))]
    return max(found) if found else None


def stop(proc: subprocess.Popen) -> None:
    with_group = os.getpgid(proc.pid)
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(with_group, sig)
            proc.wait(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phases", nargs="+", choices=sorted(PHASES))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/h200-out")))
    ap.add_argument("--site", type=Path, default=SITE, help="the engine's packages (PYTHONPATH)")
    ap.add_argument("--engine-python", help="the engine's interpreter (default: the params file's)")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds this call may take in all")
    args = ap.parse_args()
    s = Session(args.out, args.site, args.engine_python, args.budget)
    sys.path.insert(1, str(args.site))  # the kit's own imports (pydantic, datasets) that the image lacks
    for name in args.phases:
        t = time.monotonic()
        s.say(f"== phase {name}")
        try:
            result = PHASES[name](s)
        except Exception as e:  # one phase failing must not lose the others' results
            result = {"error": repr(e)}
        result["phase_s"] = round(time.monotonic() - t, 1)
        s.say(f"== phase {name} done in {result['phase_s']} s")
        s.done(name, result)


if __name__ == "__main__":
    main()
