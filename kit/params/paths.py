"""A params file's paths, checked whole when it loads, before anything is built, trained or launched:
every missing input is named in one error, and a copy moved away from the folder its paths were
written for stops with the file and key named, not build a new tree elsewhere.

A relative path is read from the folder that holds the params file. Two kinds:

- **Inputs** must exist, relative or absolute: `model.path` of an engine the kit starts (unless
  `model.demo`), `engine.python`, `engine.speculative.draft_model_path`, `decide.profile`,
  `decide.draft_config`, and every source's local `data_files` (json, parquet, csv, text builders;
  a glob pattern must match a file; a file in `data.demo_fixtures` must be one of the fixture files
  the kit writes there on demand).
- **What the kit makes** may be absent: `output_dir`, and with the demo the model (`model.path`
  under `model.demo: true`) and `data.demo_fixtures`, which the kit builds when absent. The checkout's
  `params/demo.yaml` points them at `.cache/demo/`, which a fresh clone does not have, so absence
  alone is no error. Such a path is refused when it would start a new folder at the filesystem
  root: the `..` of a file written for `params/` climbs there from `/tmp` (a new user's `kit probe`
  of a copy in /tmp trained the demo model into `/.cache/demo/model` and wrote `/outputs/`).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import TYPE_CHECKING

from kit.engines.flavor_names import FLAVOR_NAMES, NOT_STARTED

if TYPE_CHECKING:
    from kit.params.run_params import RunParams

LOCAL_BUILDERS = ("json", "parquet", "csv", "text")
"""`dataset` values whose data_files are local files (datasets' packaged builders)."""
FIXTURE_SOURCES = (
    "infinity_instruct",
    "webinstructsub",
    "codefeedback",
    "metamathqa",
    "hermes_fc",
    "agentinstruct",
)
"""The sources whose fixture files (`<source>.jsonl`) kit.demo.fixtures writes in `data.demo_fixtures`
(named here: the params are checked without importing kit.demo)."""


def _relative(value: Path | None) -> bool:
    return value is not None and not Path(value).is_absolute()


def _inputs(params: RunParams, base: Path) -> list[tuple[str, Path]]:
    """(key, path as written) of each input path the params give, relative or not (glob patterns and
    the demo's fixture files are `_data_file_problems`' to check)."""
    out: list[tuple[str, Path]] = []
    started = params.engine.flavor in FLAVOR_NAMES and params.engine.flavor not in NOT_STARTED
    if not params.model.demo and started:
        out.append(("model.path", params.model.path))
    out += [
        ("engine.python", params.engine.python),
        ("engine.speculative.draft_model_path", params.engine.speculative.draft_model_path),
        ("decide.profile", params.decide.profile),
        ("decide.draft_config", params.decide.draft_config),
    ]
    for i, source in enumerate(params.data.sources):
        if source.dataset not in LOCAL_BUILDERS:
            continue
        for j, f in enumerate(source.data_files or []):
            if not _pattern(f) and not _fixture(params, base, f):
                out.append((f"data.sources[{i}].data_files[{j}]", f))
    return [(key, value) for key, value in out if value is not None]


def _pattern(path: Path) -> bool:
    return any(c in str(path) for c in "*?[")


def _fixture(params: RunParams, base: Path, path: Path) -> bool:
    """Whether `path` lies in `data.demo_fixtures`, which the kit fills on demand."""
    fixtures = params.data.demo_fixtures
    return fixtures is not None and _full(base, path).parent == _full(base, fixtures)


def _data_file_problems(params: RunParams, base: Path) -> list[str]:
    """One line per glob pattern of a local source that matches no file, and per file named in
    `data.demo_fixtures` that is none of the fixture files the kit writes there."""
    fixture_names = {f"{name}.jsonl" for name in FIXTURE_SOURCES}
    problems = []
    for i, source in enumerate(params.data.sources):
        if source.dataset not in LOCAL_BUILDERS:
            continue
        for j, f in enumerate(source.data_files or []):
            key, full = f"data.sources[{i}].data_files[{j}]", _full(base, f)
            if _fixture(params, base, f) and Path(f).name not in fixture_names and not full.exists():
                problems.append(
                    f"{key}: {full} does not exist, and data.demo_fixtures writes only "
                    f"{', '.join(sorted(fixture_names))} there: correct the file name"
                )
            elif _pattern(f) and not _fixture(params, base, f) and not glob.glob(str(full)):
                problems.append(f"{key}: the pattern {full} matches no file ('{f}' in the file)")
    return problems


def _full(base: Path, value: Path) -> Path:
    """`value` as the kit reads it: relative to `base`, normalised without following links."""
    return Path(os.path.normpath(base / value))


def _made(params: RunParams) -> list[tuple[str, Path]]:
    """(key, path as written) of each path the kit creates when it is absent."""
    out = [("output_dir", params.output_dir)]
    if params.model.demo:
        out.append(("model.path", params.model.path))
    if params.data.demo_fixtures is not None:
        out.append(("data.demo_fixtures", params.data.demo_fixtures))
    return out


def _new_top(path: Path) -> Path | None:
    """The folder `path` would start at the filesystem root, or None when it would not."""
    top = Path(*path.parts[:2]) if len(path.parts) > 1 else None
    return top if top is not None and not top.exists() else None


def path_problems(params: RunParams, base: Path) -> list[str]:
    """One line per path of `params` (as read, before resolution against `base`, the params file's
    folder) that does not exist where it must, or would start a new tree at the root."""
    where = f"a relative path is read from {base}, the params file's folder"
    problems = []
    for key, value in _inputs(params, base):
        full = _full(base, value)
        if full.exists():
            continue
        demo = ", or set model.demo: true for the embedded demo model" if key == "model.path" else ""
        if _relative(value):
            problems.append(
                f"{key}: {full} does not exist ('{value}' in the file; {where}): give the path from "
                f"there, or an absolute one{demo}"
            )
        else:
            problems.append(f"{key}: {full} does not exist: correct the path{demo}")
    problems += _data_file_problems(params, base)
    for key, value in _made(params):
        full = _full(base, value)
        top = _new_top(full) if _relative(value) and not full.exists() else None
        if top is not None:
            problems.append(
                f"{key}: '{value}' would make {full}, a new folder {top} at the filesystem root ({where}): "
                "the file was probably moved from the folder its paths were written for. Give an "
                "absolute path, or one from there"
            )
    return problems
