"""What 193K and 20M prompts of the seed's shape take on 8, 64 and 512 GPUs, by the cost model.

    .venv/bin/python benchmarks/scaling_estimate.py [--gpu "RTX PRO 6000"] [--output-tokens 1024]

The seed's shape: Qwen3.6-27B (tests/configs/qwen3_6_27b.json), one GPU per replica (tp 1, as
`params/sglang-8gpu.example.yaml`), prompts of 1,024 tokens answered with up to 1,024 (the example's
max_tokens; the mean answer is shorter, so these are upper bounds). Per replica, the cost model's
plain ladder (`kit.decide.views.worth.mtp_worth`, with MTP's accept-length bands) gives the best tokens/s
over concurrency: the job runs at that point, its bulk at full load, then its tail (the last wave
of requests draining: one request's whole answer at the speed of a lightly loaded replica, where
MTP helps most). Printed as a markdown table for docs/scaling.md; the model's own error is ±25%.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kit.arch import arch_from_config
from kit.decide.costmodel import Hardware, Scenario, Workload
from kit.decide.views.worth import mtp_worth
from kit.probe.gpu import lookup_datasheet

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = (193_000, 20_000_000)
GPUS = (8, 64, 512)
START_S = 300.0
"""Server start of a 27B model per replica (load, CUDA graphs): once per job, all replicas at once."""
TAIL_CONCURRENCY = 8
"""Requests per replica in the tail's wave (a replica's speed there: lightly loaded)."""


def hardware(name: str) -> Hardware:
    sheet = lookup_datasheet(name)
    if sheet is None:
        raise SystemExit(f"no datasheet for {name!r}")
    return Hardware(
        sheet["bandwidth_bytes_s"],
        sheet["bf16_flops"],
        sheet["memory_bytes"],
        sheet["name"],
        **({"gemm_efficiency": sheet["gemm_efficiency"]} if "gemm_efficiency" in sheet else {}),
    )


def per_replica(gpu: str, input_len: int, output_len: int) -> dict[str, float]:
    """One replica's best plain tokens/s, MTP's (typical band) at its own best, and both at the
    tail's light load."""
    arch = arch_from_config(json.loads((ROOT / "tests" / "configs" / "qwen3_6_27b.json").read_text()))
    s = Scenario(arch, hardware(gpu), work=Workload(input_len, output_len))
    t = mtp_worth(s, [1, TAIL_CONCURRENCY, 64, 256], [1, 2, 3]).table
    typical = t[t.band == "typical"].set_index("concurrency")
    tail = typical.loc[TAIL_CONCURRENCY]
    return {
        "plain_best": float(typical.plain_tok_s.max()),
        "plain_best_c": int(typical.plain_tok_s.idxmax()),
        "mtp_best": float(typical.mtp_tok_s.max()),
        "mtp_best_c": int(typical.mtp_tok_s.idxmax()),
        "plain_tail_seq": float(tail.plain_tok_s) / TAIL_CONCURRENCY,
        "mtp_tail_seq": float(tail.mtp_tok_s) / TAIL_CONCURRENCY,
    }


def hours(s: float) -> str:
    if s >= 48 * 3600:
        return f"{s / 86400:,.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def table(r: dict[str, float], output_len: int) -> str:
    lines = [
        "| prompts | GPUs | plain: bulk + tail | MTP all along | plain, MTP for the tail |",
        "|---|---|---|---|---|",
    ]
    for n in PROMPTS:
        tokens = n * output_len
        for g in GPUS:
            plain_bulk = tokens / (g * r["plain_best"])
            mtp_bulk = tokens / (g * r["mtp_best"])
            plain_tail = output_len / r["plain_tail_seq"]
            mtp_tail = output_len / r["mtp_tail_seq"]
            cells = [
                f"{hours(START_S + plain_bulk + plain_tail)} ({hours(plain_bulk)} + {hours(plain_tail)})",
                hours(START_S + mtp_bulk + mtp_tail),
                hours(START_S + plain_bulk + mtp_tail),
            ]
            lines.append(f"| {n:,} | {g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    ap.add_argument("--input-tokens", type=int, default=1024)
    ap.add_argument("--output-tokens", type=int, default=1024)
    args = ap.parse_args()
    r = per_replica(args.gpu, args.input_tokens, args.output_tokens)
    print(
        f"Per replica ({args.gpu}, Qwen3.6-27B, tp 1): plain {r['plain_best']:,.0f} tok/s at concurrency "
        f"{r['plain_best_c']}, MTP (typical accept length) {r['mtp_best']:,.0f} tok/s at "
        f"{r['mtp_best_c']}; one sequence in the tail (concurrency {TAIL_CONCURRENCY}): plain "
        f"{r['plain_tail_seq']:.0f} tok/s, MTP {r['mtp_tail_seq']:.0f} tok/s. Server start "
        f"{START_S:.0f} s assumed.\n"
    )
    print(table(r, args.output_tokens))


if __name__ == "__main__":
    main()
