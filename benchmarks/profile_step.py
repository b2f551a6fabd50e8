"""Profile decode-step time of a Qwen3-32B-shaped dense model on one GPU and compare with the roofline.

    python3 benchmarks/profile_step.py --out docs/lab/h200/profile-synthetic-qwen3-32b --check-depth 8 \
        --attention-variants --old docs/lab/h200/profile-synthetic-qwen3-32b/profile.parquet   # H200: ~40 s
    python3 benchmarks/profile_step.py --out /tmp/p --device cpu --config tests/configs/qwen3_32b.json \
        --layers 2 --batch-sizes 1,2 --q 1 --contexts 64 --hidden-override 256   # CPU smoke run

`--backend synthetic` (default, kit/decide/profile/synthetic_step.py) times a serving engine's step
shapes: preallocated KV cache written in place, SDPA with the query heads packed by KV group (no
mask), LM head on the new rows. `--check-depth N` also times an independent direct step
(benchmarks/direct_step.py) at N layers at every grid point and compares; `--attention-variants`
times one SDPA call per way of passing q tokens; `--old` puts an earlier profile beside.
`--backend hf` times the transformers model (its DynamicCache copies the whole
cache each step, so large B x L steps measure copies). Builds random weights for `--layers` layers
(default 4; timed also at half depth and scaled to the config's 64 layers), fills the KV cache to
L with random tensors, times decode steps (CUDA graphs) for B in 1..256, q in 1, 2, 4 and L in
1024, 4096, measures device copy bandwidth, and writes `profile.parquet`, `summary.md` and
`summary.json` to `--out`: the plain step at B = 1 against weight bytes / measured copy bandwidth,
the largest-B, longest-L step against its bytes (weights + KV read) / copy bandwidth, efficiency
factors calibrated on the H200 datasheet, and the predicted tokens/s table per arm. Needs only
torch, numpy, scipy, pandas and pyarrow (transformers for `--backend hf`; no pydantic).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kit.arch import arch_from_config  # noqa: E402
from kit.decide import costmodel as cm  # noqa: E402
from kit.decide.profile.profiler import ProfileGrid, calibrate, profile_steps  # noqa: E402

H200 = cm.Hardware(bandwidth_Bps=4.8e12, flops_bf16=989e12, memory_bytes=141e9, name="H200 (datasheet)")


def copy_bandwidth(device: str, gib: float = 2.0, reps: int = 20) -> float:
    """Bytes/s of a device-to-device copy (read + write counted), as a STREAM-like ceiling."""
    import torch

    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    sync()
    return 2 * src.numel() * src.element_size() * reps / (time.perf_counter() - t0)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=ROOT / "tests/configs/qwen3_32b.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--q", default="1,2,4")
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--backend", choices=("hf", "synthetic"), default="synthetic")
    ap.add_argument("--hidden-override", type=int, default=None, help="shrink the model (CPU smoke runs)")
    ap.add_argument("--check-depth", type=int, default=0, help="direct measurement at this depth (0: none)")
    ap.add_argument("--old", type=Path, default=None, help="an earlier profile.parquet to show beside")
    ap.add_argument("--attention-variants", action="store_true", help="time SDPA per way of passing q tokens")
    args = ap.parse_args()
    cfg = json.loads(args.config.read_text())
    if args.hidden_override:
        shrink(cfg, args.hidden_override)
    arch = arch_from_config(cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bw = copy_bandwidth(args.device, gib=2.0 if args.device.startswith("cuda") else 0.25)
    grid = ProfileGrid(_ints(args.batch_sizes), _ints(args.q), _ints(args.contexts), args.reps)
    profile = profile_steps(cfg, grid, device=args.device, n_layers=args.layers, backend=args.backend)
    profile.to_parquet(args.out / "profile.parquet")
    summary = summarize(profile, arch, bw, args.device, time.perf_counter() - started)
    summary["backend"] = args.backend
    summary["command"] = shlex.join(["python3", "benchmarks/profile_step.py", *sys.argv[1:]])
    if args.check_depth:
        from direct_step import compare, direct_steps

        points = [(int(r.B), int(r.q), int(r.L)) for r in profile.itertuples()]
        try:
            check = compare(profile, direct_steps(arch, points, args.check_depth, args.device, args.reps))
            check.to_parquet(args.out / "check.parquet")
            summary["check"] = check.to_dict("records")
        except Exception as e:  # noqa: BLE001 - keep the profile and its summary whatever the check does
            summary["check_error"] = repr(e)
            print(f"direct check failed: {e!r}")
    if args.attention_variants:
        from direct_step import attention_variants

        summary["attention_variants"] = attention_variants(args.device).to_dict("records")
    if args.old:
        old = pd.read_parquet(args.old)[["B", "q", "L", "step_s"]].rename(columns={"step_s": "old_step_s"})
        both = profile.merge(old, on=["B", "q", "L"])
        summary["old"] = both[["B", "q", "L", "step_s", "old_step_s"]].to_dict("records")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (args.out / "summary.md").write_text(render(summary, profile, args))
    print((args.out / "summary.md").read_text())


def shrink(cfg: dict, h: int) -> None:
    """Shrink a config (flat or with `text_config`) to hidden size `h` for CPU smoke runs."""
    c = cfg.get("text_config") or cfg
    c.update(
        hidden_size=h,
        intermediate_size=3 * h,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=h // 4,
        vocab_size=4096,
    )
    if c.get("linear_num_value_heads"):
        c.update(
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=h // 8,
            linear_value_head_dim=h // 8,
        )


def largest_step(profile, arch, copy_bw: float) -> dict:  # noqa: ANN001
    """The q = 1 step at the largest B and L against its bytes (weights + KV read + state) / copy_bw."""
    dtype_bytes = int(profile.dtype_bytes.iloc[0])
    plain = profile[profile.q == 1]
    row = plain[(plain.B == plain.B.max()) & (plain.L == plain.L.max())].iloc[0]
    total, _ = arch.param_counts()
    work = cm.Workload(weight_bytes=total * dtype_bytes, kv_dtype_bytes=dtype_bytes)
    bound = cm.step_bytes(cm.Scenario(arch, H200, work=work), int(row.B), 1, int(row.L)) / copy_bw
    return {
        "B": int(row.B),
        "L": int(row.L),
        "step_s": float(row.step_s),
        "bytes_bound_s": bound,
        "ratio_step_to_bound": float(row.step_s) / bound,
    }


def summarize(profile, arch, copy_bw: float, device: str, elapsed: float) -> dict:  # noqa: ANN001
    """Bandwidth-bound comparisons at B = 1 and the largest point, calibrated efficiency, the ladder."""
    total, _ = arch.param_counts()
    weight_bytes = total * int(profile.dtype_bytes.iloc[0])
    b1 = profile[(profile.B == profile.B.min()) & (profile.q == 1)].sort_values("L")
    step_b1 = float(b1.step_s.iloc[0])
    bound = weight_bytes / copy_bw
    eff = calibrate(profile, arch, H200)
    s = cm.Scenario(arch, H200, eff, cm.Workload(1024, 1024, 0.9))
    ladder = cm.with_ratio(
        cm.predict_ladder(s, [1, 4, 16, 64, 128, 256], [1, 2, 3], {1: 1.90, 2: 2.68, 3: 3.28}, strict=False)
    )
    return {
        "device": device,
        "elapsed_s": elapsed,
        "copy_bandwidth_Bps": copy_bw,
        "weight_bytes": weight_bytes,
        "plain_step_B1_s": step_b1,
        "plain_step_B1_L": int(b1.L.iloc[0]),
        "bandwidth_bound_s": bound,
        "ratio_step_to_bound": step_b1 / bound,
        "cuda_graph": bool(profile.cuda_graph.all()),
        "largest": largest_step(profile, arch, copy_bw),
        "efficiency": eff.as_dict(),
        "calibration_error": _fit_errors(profile, arch, eff),
        "ladder": ladder[
            [
                "arm",
                "concurrency",
                "running",
                "feasible",
                "step_s",
                "output_tok_s",
                "ratio_vs_plain",
                "compute_bound",
            ]
        ].to_dict("records"),
    }


def _fit_errors(profile, arch, eff) -> dict:  # noqa: ANN001
    """Median and largest |predicted / measured - 1| of the calibrated model over the profile."""
    dtype_bytes = int(profile.dtype_bytes.iloc[0])
    s = cm.Scenario(arch, H200, eff, cm.Workload(kv_dtype_bytes=dtype_bytes, weight_dtype_bytes=dtype_bytes))
    err = [abs(cm.step_time(s, int(r.B), int(r.q), float(r.L)) / r.step_s - 1) for r in profile.itertuples()]
    return {"median": float(sorted(err)[len(err) // 2]), "max": float(max(err))}


def _md(df) -> str:  # noqa: ANN001
    """A pipe table without the optional `tabulate` dependency."""
    df = df.reset_index() if df.index.name or getattr(df.index, "names", [None])[0] else df
    cols = [" / ".join(str(x) for x in c if str(x)) if isinstance(c, tuple) else str(c) for c in df.columns]
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def render(s: dict, profile, args) -> str:  # noqa: ANN001
    """Markdown summary with the command, the B = 1 comparison and both tables."""
    steps = profile.pivot_table(index="B", columns=["L", "q"], values="step_s") * 1e3

    big = s["largest"]
    return "\n".join(
        [
            "# Step-time profile",
            "",
            f"Command: `{s['command']}` (device {s['device']}, "
            f"{int(profile.n_layers_profiled.iloc[0])} layers profiled and scaled, {s['elapsed_s']:.0f} s).",
            "",
            f"- profiler backend: **{s['backend']}**",
            f"- measured copy bandwidth: {s['copy_bandwidth_Bps'] / 1e12:.2f} TB/s",
            f"- weights: {s['weight_bytes'] / 1e9:.1f} GB; "
            f"bound at B=1: {s['bandwidth_bound_s'] * 1e3:.2f} ms",
            f"- measured plain step at B=1, L={s['plain_step_B1_L']}: {s['plain_step_B1_s'] * 1e3:.2f} ms "
            f"= **{s['ratio_step_to_bound']:.2f}x** the bandwidth bound",
            f"- measured plain step at B={big['B']}, L={big['L']}: {big['step_s'] * 1e3:.2f} ms "
            f"= **{big['ratio_step_to_bound']:.2f}x** its bytes bound (weights + KV read over the copy "
            f"bandwidth: {big['bytes_bound_s'] * 1e3:.2f} ms)",
            f"- CUDA graphs for every point: {s['cuda_graph']}",
            f"- efficiency calibrated on the H200 datasheet: {s['efficiency']}",
            "- calibrated step model vs this profile: median error {:.1f}%, largest {:.1f}%".format(
                100 * s["calibration_error"]["median"], 100 * s["calibration_error"]["max"]
            ),
            "",
            "## Step time (ms) at full depth",
            "",
            _md(steps),
            "",
            "## Predicted output tokens/s "
            "(1024 in / 1024 out; accept lengths 1.90 / 2.68 / 3.28 for k = 1/2/3)",
            "",
            _md(pd.DataFrame(s["ladder"])),
            "",
            *_extra_sections(s),
        ]
    )


def _extra_sections(s: dict) -> list[str]:
    """The direct-measurement check and the earlier profile, when the run made them."""
    out = []
    if s.get("check"):
        c = pd.DataFrame(s["check"])
        worst = float((c.ratio - 1).abs().max())
        out += [
            f"## Profile vs direct measurement at {int(c.depth.iloc[0])} layers (benchmarks/direct_step.py)",
            "",
            f"Largest deviation: **{100 * worst:.1f}%** over {len(c)} points (ratio = profile / direct).",
            "",
            _md(
                c.assign(profile_ms=c.profile_at_depth_s * 1e3, direct_ms=c.direct_s * 1e3)[
                    ["B", "q", "L", "profile_ms", "direct_ms", "ratio"]
                ]
            ),
            "",
        ]
    if s.get("attention_variants"):
        v = pd.DataFrame(s["attention_variants"])
        out += [
            f"## One attention call (ms), B={int(v.B.iloc[0])}, L={int(v.L.iloc[0])}, 64/8 heads, d 128",
            "",
            f"Its K/V read is {v.kv_read_gb.iloc[0]:.2f} GB. Backend `preferred` is PyTorch's own choice.",
            "",
            _md(v.pivot_table(index=["variant", "backend"], columns="q", values="ms").reset_index()),
            "",
        ]
    if s.get("old"):
        o = pd.DataFrame(s["old"])
        o["new_over_old"] = o.step_s / o.old_step_s
        out += [
            "## This profile beside the earlier one (step ms at full depth)",
            "",
            _md(
                o.assign(new_ms=o.step_s * 1e3, old_ms=o.old_step_s * 1e3)[
                    ["B", "q", "L", "new_ms", "old_ms", "new_over_old"]
                ]
            ),
            "",
        ]
    return out


if __name__ == "__main__":
    main()
