"""The four stages as plain functions: what the CLI and the notebooks both call.

from kit.params import load_params
from kit import stages
params = load_params("params/demo.yaml")
stages.probe(params); stages.decide(params); stages.generate(params); stages.analyse(params)

Each takes `rerun`: True (the CLI's default) runs the stage; False opens the stage's artifact when
the run folder holds one (probe.json, decision.json, manifest.json, summary.json) and runs the stage
only when it does not. The notebooks default to False, so a notebook opened on a finished run
loads in seconds and starts no engine; `kit run` passes True. `made(folder, stage)` says which
artifact a notebook shows and when it was made.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from kit.artifacts import Decision, Manifest, ProbeReport
from kit.decide.choose.apply import applied_words, apply_decision
from kit.demo.fixtures import ensure_demo_fixtures
from kit.demo.model import build_notice, ensure_demo_model
from kit.engines.cpu_kv import with_cpu_kv_space
from kit.engines.flavors import flavor, server_env
from kit.engines.launcher import discover
from kit.engines.parsers import chat_template
from kit.engines.request_fields import thinking_problem
from kit.errors import ModelDirError, ParamsError
from kit.params import RunParams, SamplingParams, dump_params
from kit.probe import run_probe
from kit.runfolder import RunFolder, read_json, required, write_text_atomic

if TYPE_CHECKING:
    from kit.analyse import Analysis

log = logging.getLogger(__name__)


def run_folder(params: RunParams) -> RunFolder:
    """The run folder of `params` (`outputs/<run>/`), without creating anything."""
    return RunFolder(Path(params.run_dir))


def prepare(params: RunParams, save: bool = True, inputs: bool = True) -> RunFolder:
    """Create the run folder, build the demo model and fixture data when the params ask for them
    (`inputs`: stage 4 reads only the run folder, so a run copied from the GPU box is analysed where
    its model is not), and (`save`) save the resolved params once those stand (`save_params`).
    Stage 3 saves them itself, once it holds the folder's lock and the folder accepted its settings:
    a refused run must not leave its params as the folder's own."""
    folder = run_folder(params).ensure()
    if inputs:
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
        if notice := build_notice(path, params.source_file):
            log.info(notice)
        ensure_demo_model(path)
    elif flavor(params.engine.flavor).started and not (path / "config.json").is_file():
        what = "does not exist" if not path.exists() else "has no config.json"
        raise ModelDirError(
            f"model.path {path} {what}: point it at a local Hugging Face model directory "
            "(config.json, *.safetensors, tokenizer), or set model.demo: true for the embedded demo model"
        )


def _ensure_demo_data(params: RunParams) -> None:
    """Write the fixture datasets where `data.demo_fixtures` points, unless the current ones are there."""
    if params.data.demo_fixtures is not None:
        ensure_demo_fixtures(Path(params.data.demo_fixtures))


ARTIFACTS = {"probe": "probe", "decide": "decision", "generate": "manifest", "analyse": "summary"}
"""The artifact each stage leaves (a `RunFolder` attribute); `rerun=False` opens it when it exists."""
REDO = {
    "probe": "probes again",
    "decide": "measures again (it starts the engine)",
    "generate": "resumes the generation (it starts the engine)",
    "analyse": "reads every shard again",
}


def artifact(folder: RunFolder, stage: str) -> Path:
    """The file stage `stage` writes last in `folder`."""
    return getattr(folder, ARTIFACTS[stage])


_OPENED: dict[str, bool] = {}
"""Per stage, whether its last call in this process opened the artifact (True) or ran (False)."""


def _opens(folder: RunFolder, stage: str, rerun: bool) -> bool:
    """True when the stage should open its artifact instead of running (`rerun` False, artifact there)."""
    found = not rerun and artifact(folder, stage).exists()
    if found:
        log.info("%s: opening %s (rerun=True to run the stage again)", stage, artifact(folder, stage))
    _OPENED[stage] = found
    return found


def made(folder: RunFolder, stage: str) -> str:
    """One Markdown line for a notebook: which artifact it shows, when it was made, and whether the
    stage's last call here opened it or ran the stage."""
    path = artifact(folder, stage)
    if not path.exists():
        return f"*no `{path.name}` in `{folder.root}`: the stage did not finish.*"
    when = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    age = _age(time.time() - path.stat().st_mtime)
    what = f"`{path.name}` of run `{folder.root.name}`, made {when:%Y-%m-%d %H:%M} UTC ({age} ago)"
    if not _OPENED.get(stage):
        return f"**ran the stage:** {what}."
    redo = REDO[stage]
    return f"**opened** {what}; nothing was re-run. `rerun = True` in the parameters cell {redo}."


def _age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if unit == 'day' and n > 1 else ''}"
    return f"{int(seconds)} s"


def probe(params: RunParams, *, rerun: bool = True) -> ProbeReport:
    """Stage 1: write probe.json (GPUs, engine environment, model directory, memory, backends);
    rerun=False: read probe.json when there is one."""
    folder = run_folder(params)
    if _opens(folder, "probe", rerun):
        return required(folder.read_probe(), folder.probe)
    return run_probe(params, prepare(params))


def _probe_report(params: RunParams, folder: RunFolder) -> ProbeReport:
    report = folder.read_probe()
    return report if report is not None else run_probe(params, folder)


def decide(params: RunParams, *, rerun: bool = True, fresh: bool = False) -> Decision:
    """Stage 2: measured sweep plus predicted curves; write decision.json (and sweep.parquet);
    rerun=False: read decision.json when there is one (no engine started). A sweep stopped part way
    goes on from the measurements it finished (sweep_journal.jsonl); fresh=True starts it over."""
    from kit.decide.run import run_decision  # each stage's stack loads when it runs (docs/files.md)

    folder = run_folder(params)
    if _opens(folder, "decide", rerun or fresh):
        return required(folder.read_decision(), folder.decision)
    folder = prepare(params)
    probe = _probe_report(params, folder)
    params, sized = with_cpu_kv_space(params, probe)  # the arms' servers fit the machine's memory
    decision = run_decision(params, folder, probe, fresh=fresh)
    if sized:
        decision = replace(decision, reasons=[*decision.reasons, sized])
        folder.write_decision(decision)
    return decision


def sweep(params: RunParams) -> pd.DataFrame:
    """Stage 2's measured sweep (sweep.parquet: one row per arm and concurrency), empty before it ran."""
    path = run_folder(params).sweep
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def plan(params: RunParams) -> dict[str, Any]:
    """Stage 3's prompt plan (plan.json: per source requested, kept, dropped by reason), {} before it ran."""
    path = run_folder(params).plan
    return read_json(path) if path.exists() else {}


def generate(
    params: RunParams,
    *,
    fresh: bool = False,
    shard: str | None = None,
    retry_failures: bool = False,
    rerun: bool = True,
) -> Manifest:
    """Stage 3: plan prompts, generate completions (resuming), write manifest.json; rerun=False:
    read manifest.json when there is one (no engine started, nothing resumed)."""
    from kit.decide.choose.decision import speculation_label
    from kit.generate.run import run_generation  # each stage's stack loads when it runs

    folder = run_folder(params)
    if _opens(folder, "generate", rerun or fresh or retry_failures):
        return required(folder.read_manifest(), folder.manifest)
    folder = prepare(params, save=False)
    given = params
    applied = None
    decision = folder.read_decision() if params.generate.use_decision else None
    if decision is not None:
        params, applied = apply_decision(params, decision)
        log.info(
            "engine settings from %s: %s", folder.decision, applied_words(applied, speculation_label(params))
        )
    # said in the log; the decision's mem_fraction_static is the cost model's, not the user's sizing
    params, _ = with_cpu_kv_space(params, folder.read_probe(lenient=True), users=given)
    problems = check_sampling(params)
    return run_generation(
        params,
        folder,
        fresh=fresh,
        shard=shard,
        retry_failures=retry_failures,
        from_decision=applied,
        accepted=lambda: save_params(given, folder),
        tail_base=given.engine.speculative,
        sampling_problems=problems,
    )


def check_sampling(params: RunParams) -> Callable[[SamplingParams], list[str]]:
    """Refuse, before any request, sampling settings the engine would reject, ignore or crash on;
    the same check for other settings (a batch line's own: stage 3 asks it of each once planned)."""
    eng = params.engine
    fl = flavor(eng.flavor)
    launcher = discover(params.engine_python, fl, env={**os.environ, **server_env(params)})

    def check(sampling: SamplingParams) -> list[str]:
        return fl.sampling_problems(
            sampling,
            speculative=eng.speculative.algorithm is not None,
            distribution=launcher.distribution if launcher else None,
        )

    problems = check(params.generate.sampling)
    thinking = thinking_problem(params.generate.sampling, chat_template(params.model.path))
    if thinking:
        problems.append(thinking)
    if problems:
        where = params.source_file or "the params"
        raise ParamsError(
            f"{where}: the {eng.flavor} engine cannot take these settings:\n  - " + "\n  - ".join(problems)
        )
    return check


def analyse(params: RunParams, *, rerun: bool = True) -> Analysis:
    """Stage 4: summary.json and figures from the run folder, with the rows `kit export` keeps by
    default (`fitness`, kit.export.fitness); `.summary` and `.data` (the run as read).

    rerun=False: read summary.json when there is one; `.data` reads the shards on first use."""
    from kit.analyse import Analysis, run_analysis  # each stage's stack loads when it runs
    from kit.export.fitness import with_fitness

    folder = run_folder(params)
    if _opens(folder, "analyse", rerun):
        return Analysis.opened(required(folder.read_summary(), folder.summary), folder, params.analyse)
    folder = prepare(params, inputs=False)
    return with_fitness(folder, run_analysis(folder, params.analyse))


__all__ = [
    "run_folder",
    "prepare",
    "probe",
    "decide",
    "sweep",
    "generate",
    "plan",
    "analyse",
    "made",
    "artifact",
]
