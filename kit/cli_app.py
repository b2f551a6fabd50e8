"""The `kit` command's typer app and how it is dressed: the group and its commands' usage lines
(`kit generate [OPTIONS] PARAMS`), plain on/off flags, the arguments every command takes, `--version`,
and printing a result to a stdout that may close. The commands themselves and `main` are kit/cli.py's
(which imports `app` from here: `from kit.cli import app` reads as before).

Light on purpose: `kit --help` loads typer and this (docs/files.md, "Deferred imports").
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup


class _PlainHelp:
    """`--help` shown as the plain flag it is (typer shows a type, `<bool>`, beside every flag)."""

    def get_help_option(self, ctx: typer.Context) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class KitGroup(_PlainHelp, TyperGroup):
    """The `kit` group, its `--help` a plain flag."""


class KitCommand(_PlainHelp, TyperCommand):
    """A command whose usage line reads as users know it, `kit generate [OPTIONS] PARAMS`: an
    argument by its metavar, bare when required, [bracketed] when not (typer writes `{params}`)."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces += param.get_usage_pieces(ctx)
                continue
            name = param.metavar or (param.name or "").upper()
            name = name if param.required else f"[{name}]"
            pieces.append(name + ("..." if param.nargs != 1 else ""))
        return pieces


app = typer.Typer(
    cls=KitGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Batch inference and the MTP decision, stage by stage.",
)


def command(name: str | None = None, **kwargs: Any) -> Any:
    """`app.command` with `KitCommand`."""
    return app.command(name, cls=KitCommand, **kwargs)


def flag(*names: str, help: str) -> Any:
    """A plain on/off flag (`--fresh`): no `--no-` twin, no type shown, no default printed."""
    return typer.Option(*names, help=help, metavar="", show_default=False)


ParamsArg = Annotated[Path, typer.Argument(metavar="PARAMS", help="params YAML file, e.g. params/demo.yaml")]
RunDirArg = Annotated[Path, typer.Argument(metavar="RUN_DIR", help="a run folder, e.g. outputs/demo")]
RunOpt = Annotated[
    str | None, typer.Option("--run", metavar="NAME", help="run name (default: the one in the params file)")
]


def _show_version(value: bool) -> None:
    if value:
        from kit.version import version_text

        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _kit(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            metavar="",
            help="print the kit's version and exit",
        ),
    ] = False,
) -> None:
    """Batch inference and the MTP decision, stage by stage."""


def print_json(data: object) -> None:
    """The command's result as JSON on stdout; a closed stdout (`| head`, a dropped ssh) loses only
    this printout, never the command's exit code (the work is already on disk)."""
    try:
        typer.echo(json.dumps(data, indent=2, default=str))
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)


def silence(stream: object) -> None:
    """Point a closed standard stream at /dev/null, so that writing or flushing it at exit is no error."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())  # type: ignore[attr-defined]


def say(line: str) -> None:
    """One line on stdout; a closed stdout loses only the line, as `print_json` does."""
    try:
        typer.echo(line)
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)
