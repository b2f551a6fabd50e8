r"""Run the kit's probe on a GPU box that has only torch, pandas, pyyaml and nvidia-ml-py installed.

    python3 benchmarks/probe_gpu.py --out docs/lab/h200/probe --model-config tests/configs/qwen3_6_27b.json \
        [--model-dir DIR] [--engine-python /opt/sglang/bin/python]

No pydantic, typer or psutil needed: this builds `kit.probe.ProbeInputs` by hand instead of
`RunParams`. With only `--model-config`, the config is copied into an otherwise empty temporary
model directory (the model section then reports the missing weights and plans memory from the
config's parameter count). Writes DIR/probe.json and DIR/probe.md (the go / no-go summary); the
GPU measurement (copy bandwidth, bf16 matmul, < 10 s) is on unless --no-measure.
CPU variant (no GPU: the GPU section says so): the same command on any machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.artifacts import ProbeReport  # noqa: E402
from kit.probe import ProbeInputs, build_report, probe_verdict  # noqa: E402
from kit.runfolder import write_artifact, write_text_atomic  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for probe.json and probe.md")
    p.add_argument("--model-config", type=Path, help="a config.json to probe in a temporary model dir")
    p.add_argument("--model-dir", type=Path, help="a real model directory (overrides --model-config)")
    p.add_argument("--engine-python", type=Path, default=Path(sys.executable))
    p.add_argument("--flavor", default="sglang", choices=["sglang", "vllm", "transformers"])
    p.add_argument("--context-len", type=int, default=4096)
    p.add_argument("--mem-fraction", type=float, default=0.85)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--no-measure", action="store_true", help="skip the copy / matmul measurement")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> ProbeReport:
    args = parse_args(argv)
    if args.model_dir is None and args.model_config is None:
        raise SystemExit("give --model-dir DIR or --model-config config.json")
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="probe-model-") as tmp:
        model = args.model_dir
        if model is None:
            model = Path(tmp) / args.model_config.stem
            model.mkdir()
            shutil.copy(args.model_config, model / "config.json")
        inputs = ProbeInputs(
            model_path=model.resolve(),
            output_dir=out,
            engine_python=args.engine_python,
            flavor=args.flavor,
            cache_dir=out / "logs",
            context_len=args.context_len,
            mem_fraction=args.mem_fraction,
            measure_gpu=not args.no_measure,
            tp_size=args.tp_size,
            run=out.name,
        )
        report = build_report(inputs)
    command = ["python3", "benchmarks/probe_gpu.py", *(argv if argv is not None else sys.argv[1:])]
    report = replace(report, command=" ".join(command))
    write_artifact(out / "probe.json", report)
    write_text_atomic(out / "probe.md", probe_verdict(report))
    print(probe_verdict(report))
    print(
        json.dumps(
            {
                "gpus": [d["name"] for d in report.gpus.devices],
                "measured": report.gpus.measured or None,
            },
            indent=1,
        )
    )
    return report


if __name__ == "__main__":
    main()
