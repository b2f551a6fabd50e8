"""Measured step times `T(B, q, L)` of a random-weight model built from a config.json.

Timing does not depend on weight values, so no checkpoint is needed. To save time and memory only
a few layers are built; the step time at full depth is extrapolated from two depths:
`T_full = T(n) + (N - n) * (T(n) - T(n/2)) / (n - n/2)`. The KV cache is filled to `L` with random
tensors. On a GPU each step is captured in a CUDA graph (eager timing when capture fails, recorded
in the `cuda_graph` column); on a CPU steps are timed plainly. Needs only torch, transformers,
numpy and pandas, so benchmarks/profile_step.py runs on a bare GPU box.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from kit.arch import ModelArch, arch_from_config
from kit.decide.costmodel import Efficiency, Hardware, Scenario, Workload, fit_efficiency, step_time
from kit.decide.profile.steptimer import (
    config_hash,
    depth_scaled_rows,
    lower_depth,
    time_cuda_graph,
    time_eager,
)
from kit.errors import CostModelError

PROFILE_COLUMNS = ["B", "q", "L", "step_s", "device", "config_hash", "n_layers_profiled", "n_layers_full"]


@dataclass(frozen=True)
class ProfileGrid:
    """Batch sizes, tokens per sequence and contexts to time."""

    batch_sizes: Sequence[int] = (1, 4, 16)
    q_values: Sequence[int] = (1, 2, 4)
    contexts: Sequence[int] = (256,)
    reps: int = 5


def _text_config(cfg: dict[str, Any], n_layers: int) -> Any:
    """A transformers config for the language model only, cut to `n_layers` layers."""
    from transformers import AutoConfig

    c = dict(cfg.get("text_config") or cfg)
    model_type = c.pop("model_type", None) or cfg.get("model_type")
    for key in ("architectures", "auto_map", "transformers_version"):
        c.pop(key, None)
    if isinstance(c.get("layer_types"), list):
        c["layer_types"] = c["layer_types"][:n_layers]
    c["num_hidden_layers"] = n_layers
    c["mtp_num_hidden_layers"] = 0
    try:
        return AutoConfig.for_model(model_type, **c)
    except (ValueError, KeyError) as e:
        raise CostModelError(
            f"transformers cannot build model_type {model_type!r}: {e}; upgrade transformers"
        ) from e


def build_model(cfg: dict[str, Any], n_layers: int, device: str, dtype: Any) -> Any:
    """Random-weight causal LM of `n_layers` layers, built directly on `device`."""
    import torch
    from transformers import AutoModelForCausalLM

    config = _text_config(cfg, n_layers)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    return model.eval()


def _filled_cache(model: Any, B: int, L: int) -> Any:
    """A cache holding L tokens per sequence: one real token, then random KV for the rest."""
    import torch
    from transformers import DynamicCache

    cfg, dev = model.config, model.device
    try:
        cache = DynamicCache(config=cfg)
    except TypeError:  # older transformers: no per-layer-type cache
        cache = DynamicCache()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model(
            input_ids=torch.zeros(B, 1, dtype=torch.long, device=dev), past_key_values=cache, use_cache=True
        )
    kv_heads = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    for i, kind in enumerate(types):
        if "linear" in str(kind) or L <= 1:
            continue
        kv = torch.randn(B, kv_heads, L - 1, head_dim, device=dev, dtype=model.dtype)
        cache.update(kv, kv.clone(), i)
    return cache


def _crop_to(cache: Any, L: int) -> None:
    """Drop the tokens a timed step appended (hybrid caches that cannot crop just grow by q)."""
    extra = cache.get_seq_length() - L
    if extra > 0 and getattr(cache, "is_croppable", True):
        try:
            cache.crop(-extra)
        except (ValueError, NotImplementedError):
            pass


def time_step(model: Any, B: int, q: int, L: int, reps: int, cuda_graph: bool) -> tuple[float, bool]:
    """Seconds of one forward of q new tokens for B sequences over a cache of L; and graph used."""
    import torch

    cache = _filled_cache(model, B, L)
    ids = torch.zeros(B, q, dtype=torch.long, device=model.device)

    def step() -> None:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=q)

    on_gpu = model.device.type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    if on_gpu and cuda_graph:
        try:
            return time_cuda_graph(step, reps, lambda: _crop_to(cache, L)), True
        except Exception:  # noqa: BLE001 - any capture failure falls back to eager timing
            torch.cuda.synchronize()
            cache = _filled_cache(model, B, L)
    return time_eager(step, reps, sync, lambda: _crop_to(cache, L)), False


def profile_steps(
    cfg: dict[str, Any],
    grid: ProfileGrid = ProfileGrid(),
    device: str = "cpu",
    n_layers: int | None = None,
    dtype: Any = None,
    cuda_graph: bool = True,
    backend: str = "hf",
) -> pd.DataFrame:
    """Time decode steps over the grid; returns one row per (B, q, L) at full-depth scale.

    `n_layers=None` builds the full model; otherwise `n_layers` (>= 2) layers are timed together
    with `n_layers // 2` and the difference scales the step to full depth. `backend="hf"` times
    the transformers model; `"synthetic"` times a serving engine's step shapes
    (kit.decide.profile.synthetic_step: preallocated KV cache, no cache copies, GQA without expansion).
    """
    import torch  # torch and the torch-built step load when a profile is taken (docs/files.md)

    from kit.decide.profile.synthetic_step import profile_synthetic

    if backend == "synthetic":
        return profile_synthetic(cfg, grid, device, n_layers, dtype, cuda_graph)
    if backend != "hf":
        raise CostModelError(f"unknown profiler backend {backend!r}; use 'hf' or 'synthetic'")

    arch = arch_from_config(cfg)
    full = arch.num_layers
    n = full if n_layers is None or n_layers >= full else n_layers
    if n < full and n < 2:
        raise CostModelError(f"profile at least 2 layers to scale to full depth, got n_layers={n_layers}")
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    depths = [n] if n == full else [lower_depth(arch, n), n]
    times: dict[int, dict[tuple[int, int, int], tuple[float, bool]]] = {}
    for d in depths:
        model = build_model(cfg, d, device, dtype)
        times[d] = {}
        for L in grid.contexts:
            for B in grid.batch_sizes:
                for q in grid.q_values:
                    times[d][(B, q, L)] = time_step(model, B, q, L, grid.reps, cuda_graph)
                    cuda_graph = cuda_graph and times[d][(B, q, L)][1]  # one failed capture: eager after
                    if device.startswith("cuda"):
                        torch.cuda.empty_cache()
        del model
    dtype_bytes = torch.tensor([], dtype=dtype).element_size()
    return depth_scaled_rows(times, depths, full, device, config_hash(arch), dtype_bytes).assign(backend="hf")


def load_profile(path: Any) -> pd.DataFrame:
    """Read a profile parquet, checking its columns."""
    table = pd.read_parquet(path)
    missing = [c for c in PROFILE_COLUMNS if c not in table.columns]
    if missing:
        raise CostModelError(f"{path} is not a step profile: columns {missing} missing; re-run the profiler")
    return table


def check_profile(profile: pd.DataFrame, arch: ModelArch) -> None:
    """Raise unless the profile was measured for this model's shape."""
    hashes = set(profile["config_hash"].astype(str))
    want = config_hash(arch)
    if hashes != {want}:
        raise CostModelError(
            f"step profile was measured for model shape(s) {sorted(hashes)}, not this model ({want}); "
            f"profile this model's config.json (benchmarks/profile_step.py) or drop decide.profile"
        )


PROFILE_FREE = ("bw", "flops", "gemm_half_tokens", "attn_flops", "attn_half_rows", "layer_s", "overhead_s")
"""Constants a step profile pins down: the kernel factors and the fixed costs inside one step."""


def calibrate(
    profile: pd.DataFrame, arch: ModelArch, hw: Hardware, free: Sequence[str] = PROFILE_FREE
) -> Efficiency:
    """Efficiency constants that best fit a measured profile (kit.decide.costmodel.fit: least squares
    on log step time). The hardware figures are the datasheet the factors scale."""
    return calibrate_many([(profile, arch)], hw, free)


def calibrate_many(
    profiles: Sequence[tuple[pd.DataFrame, ModelArch]], hw: Hardware, free: Sequence[str] = PROFILE_FREE
) -> Efficiency:
    """One set of efficiency constants fitted to several profiles measured on the same device."""
    scenarios: list[Scenario] = []
    points, measured = [], []
    for profile, arch in profiles:
        check_profile(profile, arch)
        dtype_bytes = int(profile["dtype_bytes"].iloc[0]) if "dtype_bytes" in profile else arch.dtype_bytes
        work = Workload(kv_dtype_bytes=dtype_bytes, weight_dtype_bytes=dtype_bytes)
        scenarios.append(Scenario(arch, hw, work=work))
        points += [(len(scenarios) - 1, int(r.B), int(r.q), float(r.L)) for r in profile.itertuples()]
        measured += list(profile["step_s"].astype(float))
    if min(measured) <= 0:
        raise CostModelError("step profile holds non-positive step times; re-run the profiler")

    def predict(eff: Efficiency) -> np.ndarray:
        with_eff = [replace(s, eff=eff) for s in scenarios]
        return np.array([step_time(with_eff[i], B, q, L) for i, B, q, L in points])

    devices = sorted({str(p["device"].iloc[0]) for p, _ in profiles})
    # verify_kv_bw 1: the profiler packs a verify's query rows into one attention call, as fast as q = 1
    start = Efficiency(overhead_s=min(measured) * 0.1, layer_s=1e-5, verify_kv_bw=1.0)
    return fit_efficiency(predict, np.array(measured), free, start, source=f"profile on {', '.join(devices)}")
