"""The four stages as plain functions: what the CLI and the notebooks both call.

from kit.params import load_params
from kit import stages
params = load_params("params/demo.yaml")
stages.probe(params); stages.decide(params); stages.generate(params); stages.analyse(params)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.errors import ModelDirError
from kit.params import RunParams, dump_params
from kit.runfolder import RunFolder, read_json, write_text_atomic

if TYPE_CHECKING:
    from kit.analyse import Analysis

log = logging.getLogger(__name__)


def run_folder(params: RunParams) -> RunFolder:
    """The run folder of `params` (`outputs/<run>/`), without creating anything."""
    return RunFolder(Path(params.run_dir))


def prepare(params: RunParams, save: bool = True) -> RunFolder:
    """Create the run folder, build the demo model and fixture data when the params ask for them,
    and (`save`) save the resolved params once those stand (`save_params`). Stage 3 saves them
    itself, once it holds the folder's lock and the folder accepted its settings: a refused run
    must not leave its params as the folder's own."""
    folder = run_folder(params).ensure()
    _ensure_model(params)
    _ensure_demo_data(params)
    if save:
        save_params(params, folder)
    return folder


def save_params(params: RunParams, folder: RunFolder) -> None:
    """Write params.yaml (an earlier, different copy is kept as `params.<n>.yaml`)."""
    text = dump_params(params)
    if folder.params.exists() and folder.params.read_text() != text:
        folder.params.rename(folder.earlier_params_copy(1 + len(folder.earlier_params())))
    if not folder.params.exists():
        write_text_atomic(folder.params, text)


def _ensure_model(params: RunParams) -> None:
    path = Path(params.model.path)
    if params.model.demo:
        from kit.demo.model import ensure_demo_model

        ensure_demo_model(path)
    elif params.engine.flavor != "external" and not (path / "config.json").is_file():
        what = "does not exist" if not path.exists() else "has no config.json"
        raise ModelDirError(
            f"model.path {path} {what}: point it at a local Hugging Face model directory "
            "(config.json, *.safetensors, tokenizer), or set model.demo: true for the embedded demo model"
        )


def _ensure_demo_data(params: RunParams) -> None:
    """Write the fixture datasets where `data.demo_fixtures` points, when none are there yet."""
    where = params.data.demo_fixtures
    if where is not None and not any(Path(where).glob("*.jsonl")):
        from kit.demo.fixtures import write_fixtures

        write_fixtures(Path(where))


def probe(params: RunParams) -> dict[str, Any]:
    """Stage 1: write probe.json (GPUs, engine environment, model directory, memory, backends)."""
    from kit.probe import run_probe

    folder = prepare(params)
    return run_probe(params, folder)


def _probe_report(params: RunParams, folder: RunFolder) -> dict[str, Any]:
    if folder.probe.exists():
        return read_json(folder.probe)
    from kit.probe import run_probe

    return run_probe(params, folder)


def decide(params: RunParams) -> dict[str, Any]:
    """Stage 2: measured sweep plus predicted curves; write decision.json (and sweep.parquet)."""
    from kit.decide.run import run_decision

    folder = prepare(params)
    return run_decision(params, folder, _probe_report(params, folder))


def generate(
    params: RunParams, *, fresh: bool = False, shard: str | None = None, retry_failures: bool = False
) -> dict[str, Any]:
    """Stage 3: plan prompts, generate completions (resuming), write manifest.json."""
    from kit.generate import run_generation

    folder = prepare(params, save=False)
    given = params
    applied = None
    if params.generate.use_decision and folder.decision.exists():
        from kit.decide.apply import apply_decision

        params, applied = apply_decision(params, read_json(folder.decision))
        log.warning("engine settings from %s: %s", folder.decision, applied)
    check_sampling(params)
    return run_generation(
        params,
        folder,
        fresh=fresh,
        shard=shard,
        retry_failures=retry_failures,
        from_decision=applied,
        accepted=lambda: save_params(given, folder),
    )


def check_sampling(params: RunParams) -> None:
    """Refuse, before any request, sampling settings the engine would reject, ignore or crash on."""
    from kit.engines.launcher import LAUNCHERS, discover
    from kit.engines.parsers import chat_template
    from kit.engines.settings import sampling_problems, thinking_problem
    from kit.errors import ParamsError

    eng = params.engine
    launcher = discover(params.engine_python, eng.flavor) if eng.flavor in LAUNCHERS else None
    problems = sampling_problems(
        eng.flavor,
        params.generate.sampling,
        speculative=eng.speculative.algorithm is not None,
        distribution=launcher.distribution if launcher else None,
    )
    thinking = thinking_problem(params.generate.sampling, chat_template(params.model.path))
    if thinking:
        problems.append(thinking)
    if problems:
        where = params.source_file or "the params"
        raise ParamsError(
            f"{where}: the {eng.flavor} engine cannot take these settings:\n  - " + "\n  - ".join(problems)
        )


def analyse(params: RunParams) -> Analysis:
    """Stage 4: summary.json and figures from the run folder; `.summary` and `.data` (the run as read)."""
    from kit.analyse import run_analysis

    folder = prepare(params)
    return run_analysis(folder, params.analyse)


__all__ = ["run_folder", "prepare", "probe", "decide", "generate", "analyse"]
