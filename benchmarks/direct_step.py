"""Direct measurement of decode / verify steps to check the profiler with (profile_step.py --check-depth).

Written apart from kit/decide/synthetic_step.py on purpose: separate (unfused) q, k, v, o, gate,
up and down projections, a KV cache in the `[B, S, kv_heads, head_dim]` layout paged engines use,
RoPE-free; attention by `scaled_dot_product_attention` on the `q` new tokens natively against the
cache (grouped-query K/V, bottom-right causal mask for q > 1), forced to the flash kernel where it
runs. Every layer of `depth` is built and timed (CUDA graph replays), with no depth scaling, so
`T_profile(depth) = step_s_profiled + (depth - n_layers_profiled) step_s_per_layer` can be compared
with it point by point. Dense full-attention models only.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kit.arch import ModelArch
from kit.decide.steptimer import time_cuda_graph, time_eager


def _weights(a: ModelArch, depth: int, opt: dict) -> list[dict[str, Any]]:
    import torch

    def w(out: int, inp: int) -> Any:
        return torch.randn(out, inp, **opt) * inp**-0.5

    h, d = a.hidden_size, a.head_dim
    return [
        {
            "q": w(a.num_heads * d, h),
            "k": w(a.num_kv_heads * d, h),
            "v": w(a.num_kv_heads * d, h),
            "o": w(h, a.num_heads * d),
            "gate": w(a.intermediate_size, h),
            "up": w(a.intermediate_size, h),
            "down": w(h, a.intermediate_size),
            "n1": torch.ones(h, **opt),
            "n2": torch.ones(h, **opt),
        }
        for _ in range(depth)
    ]


def _attend(query: Any, kc: Any, vc: Any, q: int, L: int) -> Any:
    """[B, q, H, d] queries over the first L + q cache rows `[B, S, H_kv, d]`."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    qh, k, v = query.transpose(1, 2), kc[:, : L + q].transpose(1, 2), vc[:, : L + q].transpose(1, 2)
    mask = None if q == 1 else causal_lower_right(q, L + q)
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    try:
        context = sdpa_kernel(backends, set_priority=True)
    except TypeError:  # torch < 2.6: no priority order, the default one (flash first) applies
        context = sdpa_kernel(backends)
    with context:
        return F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)


def _rms(x: Any, w: Any) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _step(a: ModelArch, layers: list, head: Any, caches: list, x: Any, B: int, q: int, L: int) -> Any:
    import torch.nn.functional as F

    d = a.head_dim
    for p, (kc, vc) in zip(layers, caches, strict=True):
        h = _rms(x, p["n1"])
        kc[:, L : L + q] = F.linear(h, p["k"]).view(B, q, a.num_kv_heads, d)
        vc[:, L : L + q] = F.linear(h, p["v"]).view(B, q, a.num_kv_heads, d)
        o = _attend(F.linear(h, p["q"]).view(B, q, a.num_heads, d), kc, vc, q, L)
        x = x + F.linear(o.reshape(B * q, a.num_heads * d), p["o"])
        h = _rms(x, p["n2"])
        x = x + F.linear(F.silu(F.linear(h, p["gate"])) * F.linear(h, p["up"]), p["down"])
    return F.linear(x, head)


def direct_steps(
    arch: ModelArch, points: list[tuple[int, int, int]], depth: int, device: str, reps: int
) -> pd.DataFrame:
    """Seconds of one step at each (B, q, L) over `depth` full layers (CUDA graphs on a GPU)."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    opt = {"device": device, "dtype": dtype}
    layers, head = _weights(arch, depth, opt), torch.randn(arch.vocab_size, arch.hidden_size, **opt)
    rows = []
    for B, L in sorted({(B, L) for B, _, L in points}):
        q_max = max(q for b, q, c in points if (b, c) == (B, L))
        shape = (B, L + q_max, arch.num_kv_heads, arch.head_dim)
        caches = [(torch.randn(shape, **opt), torch.randn(shape, **opt)) for _ in range(depth)]
        for q in sorted(q for b, q, c in points if (b, c) == (B, L)):
            x = torch.randn(B * q, arch.hidden_size, **opt)

            def step(x: Any = x, q: int = q, B: int = B, L: int = L, caches: list = caches) -> None:
                with torch.no_grad():
                    _step(arch, layers, head, caches, x, B, q, L)

            on_gpu = device.startswith("cuda")
            t = time_cuda_graph(step, reps) if on_gpu else time_eager(step, reps, lambda: None)
            rows.append({"B": B, "q": q, "L": L, "direct_s": t, "depth": depth})
        del caches
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def compare(profile: pd.DataFrame, direct: pd.DataFrame) -> pd.DataFrame:
    """Profile scaled to the direct depth beside the direct measurement, with their ratio."""
    t = profile.merge(direct, on=["B", "q", "L"])
    t["profile_at_depth_s"] = t.step_s_profiled + (t.depth - t.n_layers_profiled) * t.step_s_per_layer
    t["ratio"] = t.profile_at_depth_s / t.direct_s
    return t[["B", "q", "L", "depth", "profile_at_depth_s", "direct_s", "ratio"]]
