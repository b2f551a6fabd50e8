"""The `kit` command: run the whole pipeline or one stage from the shell.

kit run params/demo.yaml              # the four notebooks through papermill, then the HTML report
kit probe|decide|generate|analyse params/demo.yaml
kit report outputs/demo               # re-render the HTML report of a run
kit lab outputs/demo                  # JupyterLab on the run's notebooks (they open, not re-run)
kit demo-assets                       # build the embedded demo model, its draft and fixture data
kit --version                         # the kit's version (and a checkout's git commit)

`kit --help` loads typer and the light modules imported below only: each command imports what it
needs (stages, params, run folder, notebooks, report) when it runs (docs/files.md, "Deferred imports").
Here: the commands and `main`; the typer app they register on, its usage lines, flags, arguments and
JSON printing are kit/cli_app.py's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from kit.asyncrun import stop_signal_received, stop_signals
from kit.cli_app import ParamsArg, RunDirArg, RunOpt, app, command, flag, print_json, say, silence
from kit.errors import DISK_FULL, KitError, RunFolderError, disk_full_message
from kit.progress import SafeStream


def _load(path: Path, run: str | None, inputs: bool = True):
    """The params; `inputs` False for a stage that reads only the run folder (stage 4: a run copied
    from the GPU box is analysed where its engine and model are not)."""
    from kit.params import load_params

    return load_params(path, run, check_paths=inputs)


@command()
def run(
    params: ParamsArg,
    run: RunOpt = None,
    stages: Annotated[
        str | None,
        typer.Option(metavar="STAGES", help="comma-separated subset: probe,decide,generate,analyse"),
    ] = None,
) -> None:
    """Execute the stage notebooks headless into outputs/<run>/notebooks/ and render the report;
    exits 3 when the generation it ran left rows (as `kit generate` does)."""
    from kit import stages as st
    from kit.decide.choose.apply import check_adaptive_switch
    from kit.notebooks import execute_all
    from kit.report import render_report

    p = _load(params, run)
    chosen = stages.split(",") if stages else None
    generated = chosen is None or "generate" in chosen
    if generated:
        check_adaptive_switch(p)  # before stage 2 spends its sweep
    folder = st.prepare(p)
    execute_all(p, folder, chosen)
    index = render_report(folder.root, hide_code=p.report.hide_code)
    typer.echo(f"report: {index}")
    manifest = folder.read_manifest() if generated else None
    if manifest is not None and manifest.complete is False:
        typer.secho(
            "incomplete: rows are left to generate; rerun to retry them (see failures.jsonl)", err=True
        )
        raise typer.Exit(EXIT_INCOMPLETE)


@command()
def probe(params: ParamsArg, run: RunOpt = None) -> None:
    """Stage 1: probe GPUs, the engine's environment and the model directory (probe.json).

    Prints every failed and warned finding with what to do; exits 4 on NO-GO, 0 on GO."""
    from kit import stages as st
    from kit.probe.view import NO_GO_EXIT_CODE, verdict_text

    p = _load(params, run)
    report = st.probe(p)
    typer.echo(verdict_text(report))
    typer.echo(f"probe.json: {st.run_folder(p).probe}")
    if not report.summary.go:
        raise typer.Exit(NO_GO_EXIT_CODE)


@command()
def decide(
    params: ParamsArg,
    run: RunOpt = None,
    fresh: Annotated[
        bool,
        flag("--fresh", help="measure anew, setting aside a sweep stopped part way (sweep_journal.jsonl)"),
    ] = False,
) -> None:
    """Stage 2: measured sweep plus cost model; decide on speculative decoding (decision.json).

    A sweep stopped part way (Ctrl-C, a killed process) goes on from the measurements it finished
    when run again with the same params. Exit code: 0 decided, 2 error, 130 / 143 / 129 interrupted."""
    from kit import stages as st

    decision = st.decide(_load(params, run), fresh=fresh).to_json()
    print_json({k: decision.get(k) for k in ("arm", "engine_settings", "reasons")})


@command()
def generate(
    params: ParamsArg,
    run: RunOpt = None,
    fresh: Annotated[bool, flag("--fresh", help="archive this run's earlier outputs and start anew")] = False,
    shard: Annotated[
        str | None, typer.Option(metavar="I/N", help="static shard I/N of the prompt set (merge by id)")
    ] = None,
    retry_failures: Annotated[
        bool, flag("--retry-failures", help="also retry prompts the server rejected before")
    ] = False,
) -> None:
    """Stage 3: plan the prompts and generate every completion; rerun to resume.

    Exit code: 0 complete, 3 incomplete (rows left: rerun to retry them), 2 error, 130 / 143 / 129
    interrupted by SIGINT / SIGTERM / SIGHUP (finished rows saved)."""
    from kit import stages as st
    from kit.generate.verdict import session_sentence

    p = _load(params, run)
    manifest = st.generate(p, fresh=fresh, shard=shard, retry_failures=retry_failures)
    say(session_sentence(st.run_folder(p).root, manifest))  # the details: manifest.json
    raise typer.Exit(manifest.exit_code)


@command()
def analyse(params: ParamsArg, run: RunOpt = None) -> None:
    """Stage 4: summary.json and figures for a run's outputs."""
    from kit import stages as st

    summary = st.analyse(_load(params, run, inputs=False)).summary.to_json()
    print_json({k: summary.get(k) for k in ("rows", "fitness", "gaps", "figures") if k in summary})


@command()
def report(
    run_dir: RunDirArg,
    show_code: Annotated[bool, flag("--show-code", help="keep code cells in the HTML")] = False,
) -> None:
    """Render a run's executed notebooks to self-contained HTML (report/index.html)."""
    from kit.report import render_report

    typer.echo(f"report: {render_report(run_dir, hide_code=not show_code)}")


@command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def lab(
    ctx: typer.Context,
    run_dir: RunDirArg,
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="port (default: 8888 or the next free)")
    ] = None,
    no_browser: Annotated[bool, flag("--no-browser", help="open no browser tab (on a remote box)")] = False,
) -> None:
    """Open JupyterLab on a run's notebooks: run again there, each opens the artifacts the run left
    (no engine started); set `rerun = True` in a notebook's parameters to redo its stage. Options
    after the folder that the kit does not know go to JupyterLab (e.g. --ServerApp.ip=0.0.0.0)."""
    from kit.notebooks import prepare_lab
    from kit.runfolder import RunFolder

    where = prepare_lab(RunFolder(run_dir.resolve()))
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={where}"]
    cmd += [f"--port={port}"] if port else []
    cmd += ["--no-browser"] if no_browser else []
    cmd += ["--allow-root"] if os.geteuid() == 0 else []  # containers and cloud boxes often run as root
    cmd += list(ctx.args)
    typer.echo(f"JupyterLab on {where} (Ctrl-C to stop)")
    with contextlib.suppress(KeyboardInterrupt):
        raise typer.Exit(subprocess.call(cmd))


@command()
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="first run folder, e.g. outputs/plain")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", help="second run folder, e.g. outputs/mtp")],
    out: Annotated[
        Path | None, typer.Option(metavar="DIR", help="folder for the overlaid figures (PNG)")
    ] = None,
) -> None:
    """Two runs side by side (e.g. the MTP and the plain arm): a table of differences, figures."""
    from kit.analyse import compare_runs
    from kit.runfolder import RunFolder

    for run_dir in (run_a, run_b):
        if not run_dir.is_dir():
            raise RunFolderError(f"{run_dir} is not a run folder: pass outputs/<run> of a generated run")
    out = out or RunFolder(run_b).comparisons
    table, _ = compare_runs(RunFolder(run_a), RunFolder(run_b), out_dir=out)
    typer.echo(table.to_string())
    typer.echo(f"figures: {out}")


@command("export")
def export(
    run_dir: RunDirArg,
    to: Annotated[
        Path,
        typer.Option("--to", metavar="DIR", help="the dataset folder to write (must not exist, or be empty)"),
    ],
    drop: Annotated[
        str,
        typer.Option(
            metavar="RULES", help="rules that move a row to `rejected`, comma-separated (docs/export.md)"
        ),
    ] = "default",
    fmt: Annotated[
        str, typer.Option("--format", metavar="FORMAT", help="messages | raw | openai_batch")
    ] = "messages",
    reasoning: Annotated[
        str, typer.Option(metavar="WHERE", help="field (reasoning_content) | inline (<think> block)")
    ] = "field",
    allow_incomplete: Annotated[
        bool, flag("--allow-incomplete", help="export an unfinished run's rows")
    ] = False,
    overwrite: Annotated[
        bool, flag("--overwrite", help="replace --to once the export has succeeded")
    ] = False,
    push: Annotated[
        str | None, typer.Option(metavar="REPO", help="then upload the folder to this Hub dataset repo")
    ] = None,
) -> None:
    """A run as training data: train / rejected parquet splits and a dataset card (README.md) that
    `datasets.load_dataset(DIR)` opens, or an OpenAI batch output file (`--format openai_batch`)."""
    from kit.export import ExportOptions, export_run, parse_drop, push_folder

    choices = {
        "format": (fmt, ("messages", "raw", "openai_batch")),
        "reasoning": (reasoning, ("field", "inline")),
    }
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            raise typer.BadParameter(f"--{name} {value!r}: use one of {', '.join(allowed)}")
    options = ExportOptions(
        to=to,
        drop=parse_drop(drop),
        fmt=fmt,  # type: ignore[arg-type]
        reasoning=reasoning,  # type: ignore[arg-type]
        allow_incomplete=allow_incomplete,
        overwrite=overwrite,
    )
    result = export_run(run_dir, options)
    print_json(result.to_json())
    if push:
        typer.echo(f"pushed: {push_folder(result.folder, push)}")


@command("demo-assets")
def demo_assets(
    root: Annotated[Path, typer.Option(metavar="DIR", help="where to build them")] = Path(".cache/demo"),
) -> None:
    """Build the embedded demo model and the fixture data (no download); print the sha256 of the model
    and tokenizer files, which the model folder's marker records (the same on every build)."""
    from kit.demo.fixtures import ensure_demo_fixtures
    from kit.demo.model import MARKER, ensure_demo_model, read_marker

    model = ensure_demo_model(root / "model")
    typer.echo(f"model: {model} (sha256 recorded in {MARKER})")
    for name, digest in (read_marker(model) or {}).get("files", {}).items():
        typer.echo(f"  {digest}  {name}")
    typer.echo(f"data: {root / 'data'} ({len(ensure_demo_fixtures(root / 'data'))} sources)")


@command("model-shape")
def model_shape(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the shape to write (see --list)")] = "",
    out: Annotated[Path | None, typer.Argument(metavar="DIR", help="the folder to write it in")] = None,
    list_shapes: Annotated[bool, flag("--list", help="list the shapes and stop")] = False,
    force: Annotated[bool, flag("--force", help="replace a shape-only folder that is there")] = False,
) -> None:
    """Write a shape-only model folder (a real config.json and a tokenizer, no weights): SGLang and vLLM
    serve it with random weights, at the real model's speed and memory (text meaningless)."""
    from kit.demo.shape_model import write_shape_model
    from kit.modelshape import SHAPES

    if list_shapes or not name:
        for s in SHAPES.values():
            role = f"  (draft head for {s.draft_of})" if s.draft_of else ""
            typer.echo(f"{s.name:16} {s.params_b:6.1f} B params  {s.source}{role}")
        return
    if out is None:
        raise typer.BadParameter("give the folder to write the shape in: kit model-shape NAME DIR")
    path = write_shape_model(name, out, overwrite=force)
    draft_of = SHAPES[name].draft_of
    where = (
        f"engine.speculative.draft_model_path (with model.path a {draft_of} shape)"
        if draft_of
        else "model.path"
    )
    typer.echo(f"{path}: shape {name}, no weights; set {where} to it and serve it with sglang or vllm")


@command()
def adapters() -> None:
    """List the dataset adapters the prompt plan can use."""
    from kit.prompts.adapters import adapter_names

    typer.echo("\n".join(adapter_names()))


EXIT_ERROR = 2
EXIT_INCOMPLETE = 3  # kit.generate.run.EXIT_INCOMPLETE, kept here so that `kit --help` stays fast
INTERRUPTED = "interrupted by {}: finished work is saved; rerun the same command to resume"


class _LogLines(logging.Formatter):
    """The kit's normal information as plain lines; WARNING and above labelled with their level."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno == logging.INFO:
            return record.getMessage()
        return f"{record.levelname} {record.name}: {super().format(record)}"


def _log_to_stderr() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_LogLines())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("kit").setLevel(logging.INFO)


def main() -> None:
    """Entry point. Exit codes: 0 done, 2 error (one message, no traceback), 3 incomplete (rows left),
    4 `kit probe` NO-GO, 128 + signal when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP) with
    finished work saved."""
    # A reader that goes away (a dropped ssh, `2>&1 | head`) must not stop the work: progress bars
    # (the kit's and the libraries'), warnings and log lines write through this, and stop writing
    # once the pipe is closed. The exit code and the run folder still say everything.
    sys.stderr = SafeStream(sys.stderr)  # type: ignore[assignment]
    _log_to_stderr()
    try:
        # Without standalone mode, typer returns an exit code (130 for Ctrl-C) instead of exiting.
        with stop_signals():
            code = app(standalone_mode=False)
    except KitError as e:
        try:
            typer.secho(f"error: {e}", fg="red", err=True)
        except BrokenPipeError:  # nobody reads stderr any more: the exit code still says it
            silence(sys.stderr)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        code = 130
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        typer.secho(f"error: {disk_full_message(e, Path.cwd())}", fg="red", err=True)
        sys.exit(EXIT_ERROR)
    except Exception as e:
        # Usage errors (bad option, missing argument) are click exceptions; typer ships its own
        # copy of click, so they are recognised by what they can do rather than by class.
        if not (hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int)):
            raise
        e.show()
        sys.exit(e.exit_code)
    if code == 130:
        signum = stop_signal_received()
        code = 128 + signum if signum else 130
        try:
            typer.secho(INTERRUPTED.format(signal.Signals(code - 128).name), err=True)
        except BrokenPipeError:
            silence(sys.stderr)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
