"""Stage 2's answers check on its own: one speculative arm's sampled answers against plain decoding's,
on the engine a params file names (kit.decide.checks.answers), without a sweep.

    .venv/bin/python benchmarks/answers_check.py params/demo-vllm.yaml --arm spec_k1 --out check.json

Plans the run's prompts if needed, takes the pilot's sample (`decide.pilot_per_source` of each
source), starts plain's server and the arm's in turn, answers each prompt `SAMPLES` times on each
as stage 3 samples, and writes the comparison (decision.json's `answers_check` entry) to `--out`.
benchmarks/h200_sglang.py's `answers` phase runs it on SGLang with the demo model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kit.decide.checks.answers import SAMPLES, check_answers  # noqa: E402
from kit.decide.sweep.setup import answers_check_setup  # noqa: E402
from kit.engines.settings import sweep_arms  # noqa: E402
from kit.params import load_params  # noqa: E402
from kit.runfolder import RunFolder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("params", type=Path)
    ap.add_argument("--arm", required=True, help="the speculative arm, as the sweep names it (spec_k1, ...)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    params = load_params(args.params)
    arms = {a.name: a for a in sweep_arms(params)}
    if args.arm not in arms or not arms[args.arm].speculative:
        sys.exit(f"--arm {args.arm}: not a speculative arm of these params ({', '.join(arms)})")
    setup = answers_check_setup(params, RunFolder(params.run_dir).ensure(), hybrid=False)
    sample = setup.pilot_prompts
    t0 = time.monotonic()
    check, plain = check_answers(setup, arms[args.arm])
    out = {
        "arm": args.arm,
        "samples": SAMPLES,
        "prompts": len(sample),
        "sampling": params.generate.sampling.model_dump(),
        "seconds": round(time.monotonic() - t0, 1),
        "check": check,
        "plain_answered": len(plain or []),
    }
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
