"""SGLang (`python -m sglang.launch_server`): its command line, how it spells a speculative arm, its
capacity and the metrics its speculation shows up in. Flags as in SGLang's server_args.py; the
facts, with their sources and the versions checked, are in docs/engines.md."""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kit.engines import parsers
from kit.engines.arms import Arm, adaptive_bands, draft_length, section_algorithm
from kit.engines.compile_cache import CUDA_CACHE_VARS, TORCH_CACHE_VARS
from kit.engines.flavors.base import ArmSpelling, Flavor, opt
from kit.engines.start_parts import NUMBER, parts, span, stamped, summed

if TYPE_CHECKING:
    from kit.params import EngineParams, RunParams, SpeculativeParams

ALGORITHM_FLAG = {
    "MTP": "EAGLE",
    "NEXTN": "NEXTN",
    "EAGLE": "EAGLE",
    "EAGLE3": "EAGLE3",
    "STANDALONE": "STANDALONE",
    "NGRAM": "NGRAM",
}
"""`--speculative-algorithm` of each algorithm the kit names (MTP: EAGLE over the model's own heads)."""
SPEC_MAX_RUNNING = 48
"""What SGLang lowers `--max-running-requests` to when speculation is on and the flag is unset."""
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
"""The `--speculative-algorithm` values `--speculative-adaptive` runs with (0.5.16 and 0.5.23:
speculative/adaptive_spec_params.py `adaptive_unsupported_reason`; MTP is served as EAGLE)."""
ADAPTIVE_HYSTERESIS = {1: -0.25}
"""Its default bands' `down_hysteresis` (0.0 from 8 running up), kept in the bands the kit writes."""
COMPILE_CACHE_VARS = {
    **TORCH_CACHE_VARS,
    **CUDA_CACHE_VARS,
    # its own cache root (0.5.16 srt/environ.py:1135, 0.5.23 srt/environ.py:1383; else ~/.cache/sglang):
    # torch.compile graphs (srt/compilation/backend.py), FlashInfer autotune results
    # (srt/model_executor/runner/flashinfer_autotune.py); 0.5.23 also puts DeepGEMM, CuTe AOT and, unless
    # set, the variables above under it (srt/environ.py:2308 third_party_cache_defaults)
    "SGLANG_CACHE_DIR": "sglang",
    # 0.5.16: DeepGEMM's JIT kernels (srt/environ.py:675, else ~/.cache/deep_gemm), copied into
    # DG_JIT_CACHE_DIR over any value there (srt/layers/deep_gemm_wrapper/compile_utils.py:39)
    "SGLANG_DG_CACHE_DIR": "deep_gemm",
    # 0.5.16: its JIT kernels built through tvm-ffi (jit_kernel/utils/compile.py:244, else ~/.cache/tvm-ffi)
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    # 0.5.23: its JIT kernels (kernels/jit/utils/compile/cache.py:318, else ~/.cache/sglang/jit: not
    # under SGLANG_CACHE_DIR)
    "SGLANG_JIT_CACHE_DIR": "sglang-jit",
}
"""Where its server's compile caches go (kit.engines.compile_cache), with the files that read each."""
# its start, as 0.5.16 and 0.5.23 log it (model_executor/model_runner.py "Load weight end",
# model_runner_components/cuda_graph_setup.py "Capture <what> CUDA graph end" (0.5.23: "... end. bs=[..],
# elapsed="), speculative/eagle_worker_v2.py "Capture draft decode / extend CUDA graph end" and "Built
# adaptive runtime state steps=N: elapsed=", compilation/backend.py torch.compile, and
# entrypoints/http_server.py "The server is fired up and ready to roll!")
WEIGHTS_LINE = re.compile(rf"Load weight end\. elapsed={NUMBER} s")
GRAPHS_LINE = re.compile(
    rf"Capture [^\n]*? end\. [^\n]*?elapsed={NUMBER} s|Built adaptive runtime state [^\n]*?elapsed={NUMBER}s"
)
COMPILE_LINE = re.compile(rf"Compiling a graph for dynamic shape takes {NUMBER} s")
WARMUP_FROM = re.compile(r"Load weight end\.|Capture [^\n]*? end\.|Built adaptive runtime state")
READY_LINE = re.compile(r"The server is fired up and ready to roll!")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[\] ]")
"""Its log lines' timestamp (`[2026-12-03 10:50:36]`, `[... TP0]` under tensor parallelism)."""
ACCEPT_LENGTH = "sglang:spec_accept_length"
"""Its accept-length gauge (one per data-parallel rank); responses carry it too (`meta_info`)."""
PARSERS = {
    parsers.QWEN_XML: ("qwen3_coder", "qwen3"),
    parsers.QWEN_JSON: ("qwen", "qwen3"),
    parsers.DEEPSEEK_V3: ("deepseekv3", None),
    parsers.DEEPSEEK_V31: ("deepseekv31", "deepseek-v3"),
    parsers.DEEPSEEK_R1: (None, "deepseek-r1"),
}


@dataclass(frozen=True, eq=False)
class SGLang(Flavor):
    def command(self, params: RunParams, port: int) -> list[str]:
        """`python -m sglang.launch_server ...`: only the flags whose value the params set."""
        eng, spec = params.engine, params.engine.speculative
        cmd = [str(params.engine_python), "-m", str(self.launcher), "--model-path", str(params.model.path)]
        cmd += ["--host", eng.host, "--port", str(port), "--tp-size", str(eng.tp_size)]
        cmd += ["--dp-size", str(eng.dp_size)]
        cmd += opt("--mem-fraction-static", eng.mem_fraction_static)
        cmd += opt(str(self.capacity_flag), eng.max_running_requests)
        cmd += opt("--cuda-graph-max-bs", eng.cuda_graph_max_bs)
        cmd += opt("--attention-backend", eng.attention_backend)
        cmd += opt("--sampling-backend", eng.sampling_backend)
        cmd += speculative_flags(spec)
        if spec.algorithm and eng.max_running_requests is None:
            warnings.warn(
                f"speculative decoding is on and engine.max_running_requests is unset: SGLang will lower "
                f"it to {SPEC_MAX_RUNNING}. Set engine.max_running_requests to keep a larger batch.",
                stacklevel=3,
            )
        cmd += opt("--mamba-scheduler-strategy", eng.mamba_strategy)
        if eng.enable_metrics:
            cmd.append("--enable-metrics")
        cmd += opt("--context-length", eng.context_length)
        cmd += parsers.launch_flags(parsers.resolve(self, eng, params.model.path), [])
        cmd += self.shape_only_args(params.model.path)
        return cmd + list(eng.extra_args)

    def needs_gpu(self, device: str, packages: Mapping[str, str | None] | None) -> bool:
        return True

    def start_parts(self, log: str) -> dict[str, float]:
        """`weights_s` (every model it loads, the draft too), `graphs_s` (every CUDA graph capture),
        `compile_s` (torch.compile, within the captures), `warmup_s` (from the last of those to
        "ready to roll", by its timestamps: the warmup request, where first-use JIT compiles such as
        FlashInfer's land)."""
        graphs = [float(a or b) for a, b in GRAPHS_LINE.findall(log)]
        return parts(
            weights_s=summed(log, WEIGHTS_LINE),
            graphs_s=round(sum(graphs), 3) if graphs else None,
            compile_s=summed(log, COMPILE_LINE),
            warmup_s=span(stamped(log, WARMUP_FROM, STAMP), stamped(log, READY_LINE, STAMP)),
        )

    def spell_arm(self, arm: Arm) -> ArmSpelling:
        """A chain of k drafted tokens: k draft steps, top-k 1, k + 1 tokens verified per step (the
        last accepted token included)."""
        if not arm.speculative:
            return ArmSpelling()
        if arm.adaptive:  # it sets the draft tokens itself, one more than the steps it picks
            return ArmSpelling(num_steps=arm.k, eagle_topk=1, adaptive=True)
        return ArmSpelling(num_steps=arm.k, eagle_topk=1, num_draft_tokens=arm.k + 1)

    def adaptive_problem(self, eng: EngineParams) -> str | None:
        """`--speculative-adaptive` runs EAGLE / EAGLE3 (MTP served as EAGLE) at top-k 1, without DP
        attention; anything else SGLang silently falls back to fixed steps, so the kit refuses it."""
        name = section_algorithm(eng.speculative).name
        if ALGORITHM_FLAG[name] not in ADAPTIVE_ALGORITHMS:
            return (
                f"SGLang's adaptive speculation runs EAGLE or EAGLE3 (MTP too), not {name}: set "
                "engine.speculative.algorithm to one of MTP, EAGLE, EAGLE3"
            )
        if "--enable-dp-attention" in eng.extra_args:
            return "SGLang's adaptive speculation does not run with DP attention (--enable-dp-attention)"
        return None

    def accept_gauge_ranks(self, eng: EngineParams) -> int:
        return eng.dp_size * eng.replicas


def speculative_flags(spec: SpeculativeParams) -> list[str]:
    """SGLang's speculative flags for a speculative section (empty when speculation is off).

    N-gram in SGLang drafts a tree (`--speculative-ngram-max-bfs-breadth` overrides top-k); the
    kit asks for a chain of k + 1 tokens, breadth 1, so its arms mean the same on every engine.
    """
    if not spec.algorithm:
        return []
    a = section_algorithm(spec)
    flags = ["--speculative-algorithm", ALGORITHM_FLAG[a.name]]
    if a.draft == "none":
        k = draft_length(spec)
        if k is not None:
            flags += ["--speculative-num-draft-tokens", str(k + 1)]
            flags += ["--speculative-ngram-max-bfs-breadth", "1"]
        return flags
    if spec.adaptive:
        flags += ["--speculative-adaptive", "--speculative-adaptive-config", str(adaptive_config(spec))]
    for flag, value in (
        ("--speculative-num-steps", spec.num_steps),
        ("--speculative-eagle-topk", spec.eagle_topk),
        ("--speculative-num-draft-tokens", spec.num_draft_tokens),
        ("--speculative-draft-model-path", spec.draft_model_path),
    ):
        flags += opt(flag, value)
    return flags


def adaptive_config(spec: SpeculativeParams) -> Path:
    """The file of `--speculative-adaptive-config`: SGLang's default bands with every draft length
    capped at the arm's ceiling (`num_steps`; kit.engines.arms.adaptive_bands), so that the ceiling
    holds (its own defaults go up to 7 below 8 running) and `--speculative-num-steps`, the steps it
    starts at, is one of its candidates. Written where the server starts, once per ceiling and user."""
    k = spec.num_steps or 1
    bands = {
        str(first): {
            "candidate_steps": steps,
            "up_hysteresis": 0.0,
            "down_hysteresis": ADAPTIVE_HYSTERESIS.get(first, 0.0),
            "ceiling_coeff": 0,
        }
        for first, steps in adaptive_bands(k)
    }
    text = json.dumps(bands, indent=1) + "\n"
    path = Path(tempfile.gettempdir()) / f"kit-sglang-adaptive-{os.getuid()}" / f"bands-k{k}.json"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(text)
        part.replace(path)
    return path


FLAVOR = SGLang(
    name="sglang",
    title="SGLang",
    launcher="sglang.launch_server",
    distributions=("sglang",),
    parser_names=PARSERS,
    server_info=True,
    attention_backends=True,
    # both flags as a server of 0.5.x started with them on the H200 (docs/lab/h200/sglang/eagle3-rounds2)
    backend_settings={"attention_backend": "--attention-backend", "sampling_backend": "--sampling-backend"},
    capacity_flag="--max-running-requests",
    spec_max_running=SPEC_MAX_RUNNING,
    spec_metrics=(ACCEPT_LENGTH,),
    dummy_weights_args=("--load-format", "dummy"),
    # it sizes its cache from the memory free at start less (1 - mem_fraction_static) of it, so a
    # second server on the same GPU finds none unless the first took only this many tokens
    # (0.5.16: mem_cache/kv_cache_configurator.py)
    kv_cap_flag="--max-total-tokens",
    no_prefix_cache_args=("--disable-radix-cache",),
    # 0.5.16, mem_cache/kv_cache_configurator.py (_handle_max_mamba_cache): max running requests x
    # (1 + draft tokens) recurrent states, before the KV cache gets any (the H200, Qwen3.6-27B shape)
    spec_state_up_front=True,
    # fa3 imports sgl_kernel.flash_ops (1.1 GB of FA3 kernels, sgl_kernel/flash_attn.py); a bundle
    # trimmed to fit a small carry leaves it out (benchmarks/h200_pack_sglang.sh)
    backend_files={"fa3": ("sgl_kernel", "flash_ops*", "sglang-kernel")},
    # 0.5.16 on CUDA: the EAGLE draft's CUDA-graph capture imports the DSA attention backend, which
    # imports deep_gemm (speculative/eagle_worker_v2.py); seen on the H200 (docs/lab/h200/sglang/)
    speculative_modules={"deep_gemm": ("sgl-deep-gemm", ("EAGLE", "EAGLE3", "NEXTN"))},
    compile_cache_vars=COMPILE_CACHE_VARS,
)
