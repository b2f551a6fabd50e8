"""Does vLLM's CPU build sample the same answers with n-gram speculation as without? `kit generate` on
the demo model's Hermes prompts (8 prompts x 8 samples), plain and n-gram k=1, at one temperature;
prints per arm the share of answers that called a tool, how they ended, and the share of their word
3-grams already seen in the prompt or earlier in the answer (what accepted drafts copy).

    make venv engine-vllm && .venv/bin/kit demo-assets
    .venv/bin/python benchmarks/vllm_cpu_sampled_ngram.py --temperature 0.7 --out /tmp/ngram-check

Lossless speculation leaves all three alike (within sampling noise) at any temperature. Findings in
docs/decision.md ("The sweep is greedy: what it cannot see").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from kit.decide.checks.answers import repetition

REPO = Path(__file__).resolve().parents[1]


def params_for(out: Path, temperature: float, k: int) -> Path:
    p = yaml.safe_load((REPO / "params" / "demo-vllm.yaml").read_text())
    run = f"ngram-k{k}-t{temperature:g}"
    p.update(run=run, output_dir=str(out))
    p["model"]["path"] = str(REPO / ".cache" / "demo" / "model")
    p["engine"]["python"] = str(REPO / ".venv-vllm" / "bin" / "python")
    p["engine"]["extra_args"] += ["--enforce-eager"]
    p["engine"].pop("speculative", None)
    if k:
        p["engine"]["speculative"] = {"algorithm": "NGRAM", "num_steps": k}
    p["data"]["demo_fixtures"] = str(REPO / ".cache" / "demo" / "data")
    hermes = next(s for s in p["data"]["sources"] if s["name"] == "hermes_fc")
    hermes.update(
        count=8, max_tokens=96, data_files=[str(REPO / ".cache" / "demo" / "data" / "hermes_fc.jsonl")]
    )
    p["data"]["sources"] = [hermes]
    p["generate"]["sampling"].update(temperature=temperature, top_p=1.0, n=8)
    p["generate"]["use_decision"] = False
    path = out / f"{run}.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--out", type=Path, default=Path("/tmp/ngram-check"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for k in (0, 1):
        path = params_for(args.out, args.temperature, k)
        subprocess.run([sys.executable, "-m", "kit.cli", "generate", str(path)], check=True)
        run = yaml.safe_load(path.read_text())["run"]
        df = pq.read_table(sorted((args.out / run / "generations").glob("part-*.parquet"))).to_pandas()
        text = df.reasoning.fillna("") + " " + df.completion.fillna("") + " " + df.tool_calls.fillna("")
        reps = list(map(repetition, text, df.messages.astype(str)))
        print(
            f"{'plain' if not k else f'n-gram k={k}'} at temperature {args.temperature:g}: "
            f"{len(df)} answers, tool calls {df.tool_calls.notna().mean():.0%}, "
            f"ended {df.finish_reason.value_counts().to_dict()}, "
            f"repeated word 3-grams {sum(reps) / len(reps):.1%}"
        )


if __name__ == "__main__":
    main()
