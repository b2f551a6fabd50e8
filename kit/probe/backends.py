"""Which SGLang attention backends can run on a GPU arch for a model, why not, and which to pick.

Facts from SGLang's attention-backend documentation and issues: FA3 is
built for sm_80-sm_90 (standard attention only below sm_90); FA4 and trtllm kernels need datacenter
Blackwell (sm_100/103, tcgen05); trtllm_mha verifies speculation only with topk 1; triton picks
Hopper-sized tiles on sm_90 and newer, which need ~104-114 KB of shared memory per block, more than
the 99 KB (101376 B) of sm_120 workstation Blackwell.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.artifacts import Finding
from kit.artifacts.probe_sections import BackendChoice, BackendVerdict
from kit.probe.findings import finding

BACKENDS = ("fa3", "fa4", "flashinfer", "triton", "trtllm_mha", "torch_native")
TRITON_SMEM_SM90_PLUS = 104 * 1024
DATACENTER_BLACKWELL = (100, 103)
PREFERENCE = {
    90: ("fa3", "flashinfer", "triton"),
    100: ("trtllm_mha", "fa4", "flashinfer", "triton"),
    103: ("trtllm_mha", "fa4", "flashinfer", "triton"),
    120: ("flashinfer",),
    121: ("flashinfer",),
}
DEFAULT_PREFERENCE = ("flashinfer", "triton", "fa3", "torch_native")


@dataclass(frozen=True)
class ModelTraits:
    """What of the model decides the attention backend."""

    is_mla: bool = False
    is_hybrid: bool = False
    head_dim: int = 128
    spec_topk: int | None = None
    """eagle topk when speculation is planned, else None."""


def _v(backend: str, status: str, reason: str) -> BackendVerdict:
    return BackendVerdict(backend=backend, status=status, reason=reason)


def _fa3(sm: int, m: ModelTraits) -> BackendVerdict:
    if not 80 <= sm <= 90:
        return _v("fa3", "fail", f"FlashAttention 3 kernels are built for sm_80-sm_90, not sm_{sm}")
    if sm < 90 and m.is_mla:
        return _v("fa3", "fail", f"fa3 on sm_{sm} runs standard attention only, not MLA")
    if m.head_dim > 256 and not m.is_mla:
        return _v("fa3", "fail", f"head_dim {m.head_dim} > 256 is beyond FlashAttention 3")
    return _v("fa3", "ok", "Hopper's default backend" if sm == 90 else f"runs standard attention on sm_{sm}")


def _fa4(sm: int, m: ModelTraits) -> BackendVerdict:
    if sm in DATACENTER_BLACKWELL:
        return _v("fa4", "ok", "FlashAttention 4 targets datacenter Blackwell (used for prefill)")
    why = (
        "needs datacenter Blackwell tcgen05 instructions, absent on"
        if sm >= 120
        else "targets sm_100/103, not"
    )
    return _v("fa4", "fail", f"FlashAttention 4 {why} sm_{sm}")


def _flashinfer(sm: int, m: ModelTraits) -> BackendVerdict:
    if sm < 80:
        return _v("flashinfer", "warn", f"sm_{sm} predates bf16 tensor cores: expect limited support")
    if not m.is_mla and m.head_dim not in (64, 128, 256):
        return _v(
            "flashinfer", "fail", f"flashinfer kernels are built for head_dim 64/128/256, not {m.head_dim}"
        )
    if m.is_hybrid and sm in DATACENTER_BLACKWELL:
        return _v(
            "flashinfer",
            "warn",
            "some SGLang 0.5.x releases limit hybrid linear-attention models on "
            "datacenter Blackwell to trtllm_mha, triton and fa4",
        )
    return _v("flashinfer", "ok", f"runs on sm_{sm}")


def _triton(sm: int, smem: int | None, m: ModelTraits) -> BackendVerdict:
    if sm < 90:
        return _v("triton", "ok", f"Ampere/Ada tile sizes fit sm_{sm}'s shared memory")
    if smem is None:
        return _v("triton", "warn", "per-block shared memory unknown: triton needs ~104-114 KB on sm_90+")
    if smem < TRITON_SMEM_SM90_PLUS:
        return _v(
            "triton",
            "fail",
            f"triton attention picks Hopper-sized tiles on sm_{sm} and needs ~104-114 KB "
            f"of shared memory per block; this GPU allows {smem // 1024} KB ({smem} B)",
        )
    return _v("triton", "ok", f"{smem // 1024} KB of shared memory per block is enough")


def _trtllm_mha(sm: int, m: ModelTraits) -> BackendVerdict:
    if sm not in DATACENTER_BLACKWELL:
        return _v("trtllm_mha", "fail", f"TensorRT-LLM kernels need sm_100/103, not sm_{sm}")
    if m.is_mla:
        return _v("trtllm_mha", "fail", "MLA models use trtllm_mla, not trtllm_mha")
    if m.spec_topk and m.spec_topk > 1:
        return _v(
            "trtllm_mha", "fail", f"trtllm_mha verifies speculation only with topk 1 (planned {m.spec_topk})"
        )
    return _v("trtllm_mha", "ok", "datacenter Blackwell's default backend")


def backend_verdicts(sm: int | None, smem_per_block: int | None, model: ModelTraits) -> list[BackendVerdict]:
    """One verdict per backend in `BACKENDS`: status ok / warn / fail and the reason."""
    if sm is None:
        return [_v(b, "fail", "no CUDA GPU") for b in BACKENDS]
    return [
        _fa3(sm, model),
        _fa4(sm, model),
        _flashinfer(sm, model),
        _triton(sm, smem_per_block, model),
        _trtllm_mha(sm, model),
        _v("torch_native", "ok", "runs anywhere, slowly: for debugging only"),
    ]


def recommend_backend(sm: int | None, verdicts: list[BackendVerdict], model: ModelTraits) -> BackendChoice:
    """The `--attention-backend` value to pass, and why."""
    if sm is None:
        return BackendChoice(backend=None, reason="no CUDA GPU: SGLang cannot run here")
    if model.is_mla and sm in DATACENTER_BLACKWELL:
        return BackendChoice(backend="trtllm_mla", reason=f"SGLang's MLA backend for sm_{sm}")
    status = {v["backend"]: v["status"] for v in verdicts}
    for wanted in ("ok", "warn"):
        for b in PREFERENCE.get(sm, DEFAULT_PREFERENCE):
            if status.get(b) == wanted:
                return BackendChoice(
                    backend=b,
                    reason=f"first {wanted} backend in sm_{sm}'s preference order"
                    f" ({', '.join(PREFERENCE.get(sm, DEFAULT_PREFERENCE))})",
                )
    return BackendChoice(backend="torch_native", reason="no fast backend can run: torch_native is slow")


def backend_findings(
    verdicts: list[BackendVerdict], rec: BackendChoice, requested: str | None
) -> list[Finding]:
    """Findings of section `backends`: the recommendation, and the backend the params ask for, if any.

    Backends that cannot run are listed in the report's `backends` table, not as warnings: only
    the one that would be used matters.
    """
    out = [
        finding(
            "backends",
            "recommended",
            "ok" if rec["backend"] else "warn",
            rec["backend"],
            rec["reason"],
            "" if rec["backend"] else "run SGLang on a machine with an NVIDIA GPU",
        )
    ]
    verdict = next((v for v in verdicts if v["backend"] == requested), None)
    if requested and verdict and verdict["status"] != "ok":
        out.append(
            finding(
                "backends",
                "requested",
                verdict["status"],
                requested,
                verdict["reason"],
                f"set engine.attention_backend to {rec['backend']} (or leave it unset)",
            )
        )
    elif requested:
        why = verdict["reason"] if verdict else "not one the probe knows: SGLang will check it at start"
        out.append(finding("backends", "requested", "ok", requested, why))
    return out
