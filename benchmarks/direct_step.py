"""Direct measurement of decode / verify steps to check the profiler with (profile_step.py --check-depth).

Written apart from kit/decide/profile/synthetic_step.py on purpose: separate (unfused) q, k, v, o, gate,
up and down projections, a separate layer loop; attention by `scaled_dot_product_attention` with
the query heads of a KV group as rows (as GQA verify kernels take them), the kernel PyTorch picks,
and no mask (as the profiler: a verify kernel applies the q x q causal triangle in-register, while
PyTorch's masked kernels cost 1.1-1.6x the unmasked one, see `attention_variants`). Every layer of
`depth` is built and timed (CUDA graph replays), with no depth scaling, so `T_profile(depth) =
step_s_profiled + (depth - n_layers_profiled) step_s_per_layer` can be compared with it point by
point. Dense full-attention models only.

`attention_variants` times one attention call per way of handing `q` new tokens to SDPA (packed
or native heads, with or without a causal mask): the measurement behind the profiler's choice.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kit.arch import ModelArch
from kit.decide.profile.steptimer import time_cuda_graph, time_eager


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


def _sdpa(query: Any, k: Any, v: Any, mask: Any = None, gqa: bool = False, backend: Any = None) -> Any:
    """SDPA with the flash kernel preferred (or only `backend` when given)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = (
        [backend]
        if backend
        else [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )
    try:
        context = sdpa_kernel(order, set_priority=True)
    except TypeError:  # torch < 2.6: no priority order, the default one (flash first) applies
        context = sdpa_kernel(order)
    with context:
        return F.scaled_dot_product_attention(query, k, v, attn_mask=mask, enable_gqa=gqa)


def _attend(query: Any, kc: Any, vc: Any, q: int, L: int) -> Any:
    """[B, q, H, d] queries over the first L + q cache rows `[B, H_kv, S, d]`, as `[B, q, H_kv, g, d]`."""
    import torch.nn.functional as F

    B, _, H, d = query.shape
    hkv = kc.shape[1]
    rows = query.view(B, q, hkv, H // hkv, d).permute(0, 2, 3, 1, 4).reshape(B, hkv, -1, d)
    o = F.scaled_dot_product_attention(rows, kc[:, :, : L + q], vc[:, :, : L + q])
    return o.view(B, hkv, H // hkv, q, d).permute(0, 3, 1, 2, 4)


def _rms(x: Any, w: Any) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _step(a: ModelArch, layers: list, head: Any, caches: list, x: Any, B: int, q: int, L: int) -> Any:
    import torch.nn.functional as F

    d = a.head_dim
    for p, (kc, vc) in zip(layers, caches, strict=True):
        h = _rms(x, p["n1"])
        kc[:, :, L : L + q] = F.linear(h, p["k"]).view(B, q, a.num_kv_heads, d).transpose(1, 2)
        vc[:, :, L : L + q] = F.linear(h, p["v"]).view(B, q, a.num_kv_heads, d).transpose(1, 2)
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
        shape = (B, arch.num_kv_heads, L + q_max, arch.head_dim)
        caches = [(torch.randn(shape, **opt), torch.randn(shape, **opt)) for _ in range(depth)]
        for q in sorted(q for b, q, c in points if (b, c) == (B, L)):
            x = torch.randn(B * q, arch.hidden_size, **opt)

            def step(x: Any = x, q: int = q, B: int = B, L: int = L, caches: list = caches) -> None:
                with torch.no_grad():
                    _step(arch, layers, head, caches, x, B, q, L)

            graph = device.startswith("cuda")
            try:
                t = time_cuda_graph(step, reps) if graph else time_eager(step, reps, lambda: None)
            except RuntimeError:  # a kernel that cannot be captured: eager timing, recorded as such
                graph, t = False, time_eager(step, reps, torch.cuda.synchronize)
            rows.append({"B": B, "q": q, "L": L, "direct_s": t, "depth": depth, "direct_cuda_graph": graph})
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


def causal_rows(q: int, L: int, group: int, device: str) -> Any:
    """Boolean mask `[group q, L + q]`: new token t of each packed row sees the cache and tokens <= t."""
    import torch

    if q == 1:
        return None
    token = torch.arange(q, device=device).repeat(group)
    return torch.arange(L + q, device=device)[None, :] <= (L + token)[:, None]


def _time_sdpa(args: tuple, backend: Any) -> dict:
    import torch

    label = "preferred" if backend is None else backend.name.lower()
    try:
        ms = time_eager(lambda: _sdpa(*args[:3], args[3], args[4], backend), 20, torch.cuda.synchronize) * 1e3
    except RuntimeError as e:
        ms, label = float("nan"), f"{label} ({str(e).splitlines()[0][:60]})"
    return {"backend": label, "ms": ms}


def attention_variants(
    device: str, B: int = 64, L: int = 4096, heads: int = 64, kv_heads: int = 8
) -> pd.DataFrame:
    """Milliseconds of one attention call (head_dim 128, bf16) per way of handing q tokens to SDPA."""
    import torch
    from torch.nn.attention import SDPBackend
    from torch.nn.attention.bias import causal_lower_right

    backends = (None, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)
    opt, d, g = {"device": device, "dtype": torch.bfloat16}, 128, heads // kv_heads
    rows = []
    for q in (1, 2, 4):
        k, v = (torch.randn(B, kv_heads, L + q, d, **opt) for _ in range(2))
        native = torch.randn(B, heads, q, d, **opt)
        packed = torch.randn(B, kv_heads, g * q, d, **opt)
        boolean = causal_rows(q, L, g, device)
        lower_right = None if q == 1 else causal_lower_right(q, L + q)
        variants = {
            "packed by KV group, no mask (profiler, direct check)": (packed, k, v, None, False),
            "packed, boolean causal mask (earlier profiler)": (packed, k, v, boolean, False),
            "native heads, enable_gqa, no mask": (native, k, v, None, True),
            "native heads, enable_gqa, causal_lower_right": (native, k, v, lower_right, True),
        }
        for name, args in variants.items():
            for backend in backends:
                rows.append({"q": q, "variant": name, **_time_sdpa(args, backend)})
    kv_gb = 2 * B * kv_heads * L * d * 2 / 1e9
    return pd.DataFrame(rows).assign(B=B, L=L, kv_read_gb=kv_gb)
