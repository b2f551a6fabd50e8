"""Every SGLang command line the kit can build, parsed by SGLang's own argument parser.

SGLang cannot run here (its kernels need a GPU), but `sglang.srt.server_args.prepare_server_args`,
installed with `--no-deps` in .venv-sglang (`make engine-sglang`, SGLang 0.5.23), is the real judge
of a launch command: argparse exits on a flag this version does not know, one that is ambiguous,
or a choice it does not offer. The commands are the ones the kit would run: built by its command
builders, then adapted to the installed launcher as `ServerProcess.start` does.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml
from engines import SGLANG_PYTHON, engine_python
from fixtures_models import qwen36_like

from kit.decide.sweep.layout import sweep_server_params
from kit.engines.arms import ALGORITHMS, Arm
from kit.engines.flavors import flavor, server_command
from kit.engines.launcher import Launcher, adapt_flags, choice_problems, discover
from kit.engines.settings import apply_settings, arm_engine, decided_settings
from kit.params import RunParams, load_params
from kit.probe import GpuFacts, run_probe
from kit.probe.backends import BACKENDS
from kit.probe.recommend import recommended_commands
from kit.runfolder import RunFolder

REPO = Path(__file__).resolve().parent.parent
QWEN36_TEMPLATE = (
    "{%- if tools %}<tools>{{ tools | tojson }}</tools> <tool_call>\n<function=name>\n"
    "<parameter=x>v</parameter>\n</function>\n</tool_call>{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{%- endif %}"
    "{%- endif %}"
)
PARSE = r"""
import contextlib, io, json, sys
from sglang.srt.server_args import prepare_server_args
out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            a = prepare_server_args(argv)
        out.append({"ok": True, "speculative_algorithm": a.speculative_algorithm,
                    "max_running_requests": a.max_running_requests, "tool_call_parser": a.tool_call_parser,
                    "reasoning_parser": a.reasoning_parser, "attention_backend": a.attention_backend,
                    "disable_radix_cache": a.disable_radix_cache, "max_total_tokens": a.max_total_tokens,
                    "speculative_adaptive": a.speculative_adaptive,
                    "speculative_num_steps": a.speculative_num_steps,
                    "speculative_eagle_topk": a.speculative_eagle_topk,
                    "speculative_adaptive_config": a.speculative_adaptive_config})
    except SystemExit:
        out.append({"ok": False, "error": err.getvalue().strip().splitlines()[-1:]})
print(json.dumps(out))
"""
H200 = GpuFacts(
    name="NVIDIA H200", arch="sm_90", memory_total_bytes=143771 * 2**20, smem_per_block_optin=232448
)

pytestmark = pytest.mark.slow


def sglang_parse(argvs: list[list[str]]) -> list[dict]:
    """Each argv (without the interpreter and module) through SGLang's own parser, in one process."""
    python = engine_python(SGLANG_PYTHON, "engine-sglang")
    out = subprocess.run(
        [str(python), "-c", PARSE], input=json.dumps(argvs), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def launcher() -> Launcher:
    found = discover(engine_python(SGLANG_PYTHON, "engine-sglang"), flavor("sglang"))
    assert found is not None and found.version == "0.5.23"
    return found


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> RunParams:
    """params/sglang-8gpu.example.yaml on a Qwen3.6-27B-shaped model dir with its chat template style."""
    model = qwen36_like(tmp_path_factory.mktemp("qwen36") / "model").path
    (model / "chat_template.jinja").write_text(QWEN36_TEMPLATE)
    p = load_params(REPO / "params" / "sglang-8gpu.example.yaml", check_paths=False)
    out = tmp_path_factory.mktemp("out")
    return p.model_copy(
        update={
            "model": p.model.model_copy(update={"path": model}),
            "engine": p.engine.model_copy(update={"python": SGLANG_PYTHON}),
            "output_dir": out,
        }
    )


def kit_command(params: RunParams, launcher: Launcher) -> list[str]:
    """What `ServerProcess.start` would launch: the builder's argv, adapted to the launcher."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmd, _ = adapt_flags(server_command(params, 30000), launcher)
    assert not choice_problems(cmd, launcher)
    return cmd[cmd.index("sglang.launch_server") + 1 :]


def with_engine(params: RunParams, **update: object) -> RunParams:
    return params.model_copy(update={"engine": params.engine.model_copy(update=update)})


def test_every_command_the_kit_builds_parses(example: RunParams, launcher: Launcher, tmp_path: Path) -> None:
    named: dict[str, list[str]] = {"example": kit_command(example, launcher)}
    for algo in ALGORITHMS.values():  # every speculative algorithm, every draft length of a sweep
        spec = {
            "algorithm": algo.name,
            "draft_model_path": "/models/draft" if algo.draft == "model" else None,
        }
        p = with_engine(example, speculative=example.engine.speculative.model_copy(update=spec))
        # the arms side by side
        p, _ = sweep_server_params(p, flavor("sglang"), ["--max-total-tokens", "91052"])
        for k in (0, 1, 2, 3):
            arm_params = p.model_copy(update={"engine": arm_engine(p, Arm(k, algo.name), hybrid=True)})
            named[f"sweep {algo.name} k={k}"] = kit_command(arm_params, launcher)
    for backend in BACKENDS:
        named[f"backend {backend}"] = kit_command(with_engine(example, attention_backend=backend), launcher)
    for arm in (Arm(3, "MTP"), Arm(0)):
        settings = decided_settings(
            arm, flavor="sglang", memory_running=96, mem_fraction=0.85, dp_size=8, tp_size=1,
            attention_backend="fa3", hybrid=True,
        )  # fmt: skip
        applied = apply_settings(example, arm, settings)[0]
        named[f"decision applied {arm.name}"] = kit_command(applied, launcher)
    folder = RunFolder(example.run_dir).ensure()
    report = run_probe(example, folder, gpus=[H200])
    assert report["engine_env"]["launcher"]["flags"], "the probe read the real launcher's --help"
    for name, cmd in recommended_commands(example, report.recommended, launcher).items():
        named[f"probe {name}"] = cmd[cmd.index("sglang.launch_server") + 1 :]

    results = dict(zip(named, sglang_parse(list(named.values())), strict=True))
    refused = {name: r["error"] for name, r in results.items() if not r["ok"]}
    assert not refused, refused
    assert results["example"]["tool_call_parser"] == "qwen3_coder"
    assert results["example"]["reasoning_parser"] == "qwen3"
    assert results["sweep MTP k=3"]["speculative_algorithm"] == "EAGLE"
    assert results["sweep NGRAM k=2"]["speculative_algorithm"] == "NGRAM"
    sweep = [r for n, r in results.items() if n.startswith("sweep ")]
    assert {(r["disable_radix_cache"], r["max_total_tokens"]) for r in sweep} == {(True, 91052)}
    assert results["example"]["disable_radix_cache"] is False, "stage 3 keeps its prefix cache"
    assert results["decision applied spec_k3"]["max_running_requests"] == 96, "what memory holds, not 48"
    assert results["decision applied plain"]["max_running_requests"] is None, "the engine's own capacity"
    assert {r["attention_backend"] for n, r in results.items() if n.startswith("backend")} == set(BACKENDS)


BANDS = r"""
import json, sys
from sglang.srt.speculative.adaptive_spec_params import (
    AdaptiveSpeculativeParams, resolve_candidate_steps_from_config)
out = []
for path, k in json.load(sys.stdin):
    a = AdaptiveSpeculativeParams(initial_steps=k, cfg_path=path)
    out.append({"candidates": resolve_candidate_steps_from_config(path),
                "steps": {b: a.get_steps_for_batch(b) for b in (1, 8, 32, 64, 256)},
                "most": max(max(a._route(b).candidate_steps) for b in (1, 8, 32, 64, 256))})
print(json.dumps(out))
"""


def test_an_adaptive_arm_parses_with_its_ceiling(example: RunParams, launcher: Launcher) -> None:
    """The sweep's adaptive arm (`decide.adaptive_k`): SGLang's own parser takes
    `--speculative-adaptive` and the bands the kit writes, and SGLang's own adaptive code reads them:
    the steps it starts at are among its candidates (else it refuses to start) and no band goes
    above the ceiling (its default bands go up to 7 below 8 running). k=2 is no candidate of
    SGLang's default bands, but is of the kit's, capped at the ceiling."""
    cmds = []
    for k in (1, 2, 3):
        arm = Arm(k, "MTP", adaptive=True)
        cmds.append(
            kit_command(example.model_copy(update={"engine": arm_engine(example, arm, True)}), launcher)
        )
    fixed = example.model_copy(update={"engine": arm_engine(example, Arm(3, "MTP"), hybrid=True)})
    parsed = sglang_parse([*cmds, kit_command(fixed, launcher)])
    assert all(r["ok"] for r in parsed), parsed
    for k, r in zip((1, 2, 3), parsed, strict=False):
        assert r["speculative_adaptive"] is True and r["speculative_algorithm"] == "EAGLE", r
        assert (r["speculative_num_steps"], r["speculative_eagle_topk"]) == (k, 1), r
    assert parsed[-1]["speculative_adaptive"] is False, "a fixed arm stays fixed"
    python = engine_python(SGLANG_PYTHON, "engine-sglang")
    files = [[r["speculative_adaptive_config"], k] for k, r in zip((1, 2, 3), parsed, strict=False)]
    out = subprocess.run([str(python), "-c", BANDS], input=json.dumps(files), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    for k, read in zip((1, 2, 3), json.loads(out.stdout.strip().splitlines()[-1]), strict=True):
        assert k in read["candidates"] and read["most"] == k, read
        assert read["steps"] == {"1": k, "8": k, "32": 1, "64": 0, "256": 0}, read


def test_the_parser_refuses_what_the_kit_adapts_away(example: RunParams, launcher: Launcher) -> None:
    """SGLang 0.5.23 split --cuda-graph-max-bs; unadapted, the kit's command would not start."""
    p = with_engine(example, cuda_graph_max_bs=64, max_running_requests=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = server_command(p, 30000)
    raw = raw[raw.index("sglang.launch_server") + 1 :]
    adapted = kit_command(p, launcher)
    assert "--cuda-graph-max-bs-decode" in adapted and "--cuda-graph-max-bs" not in adapted
    bad_parser = [*adapted, "--tool-call-parser", "no_such_parser"]
    raw_result, adapted_result, bad = sglang_parse([raw, adapted, bad_parser])
    assert not raw_result["ok"] and "ambiguous" in " ".join(raw_result["error"])
    assert adapted_result["ok"]
    assert not bad["ok"] and launcher.check_choice("--tool-call-parser", "no_such_parser")


def test_the_h200_params_and_a_shape_only_model_parse(launcher: Launcher, tmp_path: Path) -> None:
    """params/h200-sglang.yaml (what ran on the H200 with SGLang 0.5.16) over a shape-only folder:
    `--load-format dummy` and the sampling / grammar backends are flags SGLang's parser takes."""
    from kit.demo.fixtures import write_fixtures
    from kit.demo.shape_model import write_shape_model

    shape = write_shape_model("qwen3-8b", tmp_path / "qwen3-8b")
    raw = yaml.safe_load((REPO / "params" / "h200-sglang.yaml").read_text())
    raw["model"]["path"], raw["output_dir"] = str(shape), str(tmp_path)  # where the benchmark writes it
    raw["engine"]["python"] = str(SGLANG_PYTHON)
    data = write_fixtures(tmp_path / "data")  # the file's comment writes them before its runs
    for src in raw["data"]["sources"]:
        src["data_files"] = [str(data[src["adapter"]])]
    (tmp_path / "h200.yaml").write_text(yaml.safe_dump(raw))
    p = load_params(tmp_path / "h200.yaml")
    plain, ngram = (
        kit_command(p.model_copy(update={"engine": arm_engine(p, arm, hybrid=False)}), launcher)
        for arm in (Arm(0), Arm(2, "NGRAM"))
    )
    assert plain[plain.index("--load-format") + 1] == "dummy"
    parsed = sglang_parse([plain, ngram])
    assert all(r["ok"] for r in parsed), parsed
    assert parsed[1]["speculative_algorithm"] == "NGRAM" and parsed[1]["max_running_requests"] == 256
