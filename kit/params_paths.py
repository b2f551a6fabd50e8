"""A params file's relative paths, checked when it loads: a copy moved away from the folder its paths
were written for must stop with the file and key named, not build a new tree elsewhere.

A relative path is read from the folder that holds the params file. Two kinds:

- **Inputs** must exist: `model.path` of an engine the kit starts (unless `model.demo`),
  `engine.python`, `engine.speculative.draft_model_path`, `decide.profile`, `decide.draft_config`,
  and a local builder's `data_files` (json, parquet, csv, text; a glob pattern is left to the plan,
  and files under `data.demo_fixtures` are written there on demand).
- **What the kit makes** may be absent: `output_dir`, and with the demo the model (`model.path`
  under `model.demo: true`) and `data.demo_fixtures`, which the kit builds when absent. The checkout's
  `params/demo.yaml` points them at `.cache/demo/`, which a fresh clone does not have, so absence
  alone is no error. Such a path is refused when it would start a new folder at the filesystem
  root: the `..` of a file written for `params/` climbs there from `/tmp` (a new user's `kit probe`
  of a copy in /tmp trained the demo model into `/.cache/demo/model` and wrote `/outputs/`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kit.engines.flavors import FLAVORS

if TYPE_CHECKING:
    from kit.params import RunParams

LOCAL_BUILDERS = ("json", "parquet", "csv", "text")
"""`dataset` values whose data_files are local files (datasets' packaged builders)."""


def _relative(value: Path | None) -> bool:
    return value is not None and not Path(value).is_absolute()


def _inputs(params: RunParams) -> list[tuple[str, Path]]:
    """(key, path as written) of each input path the params give, relative or not."""
    out: list[tuple[str, Path]] = []
    flavor = FLAVORS.get(params.engine.flavor)
    if not params.model.demo and flavor is not None and flavor.started:
        out.append(("model.path", params.model.path))
    out += [
        ("engine.python", params.engine.python),
        ("engine.speculative.draft_model_path", params.engine.speculative.draft_model_path),
        ("decide.profile", params.decide.profile),
        ("decide.draft_config", params.decide.draft_config),
    ]
    fixtures = params.data.demo_fixtures
    for i, source in enumerate(params.data.sources):
        if source.dataset not in LOCAL_BUILDERS:
            continue
        for j, f in enumerate(source.data_files or []):
            in_fixtures = fixtures is not None and Path(f).parent == Path(fixtures)
            if not any(c in str(f) for c in "*?[") and not in_fixtures:
                out.append((f"data.sources[{i}].data_files[{j}]", f))
    return [(key, value) for key, value in out if value is not None]


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


def relative_path_problems(params: RunParams, base: Path) -> list[str]:
    """One line per relative path of `params` (as read, before resolution against `base`, the params
    file's folder) that does not exist where it must, or would start a new tree at the root."""
    where = f"a relative path is read from {base}, the params file's folder"
    problems = []
    for key, value in _inputs(params):
        full = Path(os.path.normpath(base / value))
        if _relative(value) and not full.exists():
            problems.append(
                f"{key}: {full} does not exist ('{value}' in the file; {where}): give the path from "
                "there, or an absolute one"
                + (", or set model.demo: true for the embedded demo model" if key == "model.path" else "")
            )
    for key, value in _made(params):
        full = Path(os.path.normpath(base / value))
        top = _new_top(full) if _relative(value) and not full.exists() else None
        if top is not None:
            problems.append(
                f"{key}: '{value}' would make {full}, a new folder {top} at the filesystem root ({where}): "
                "the file was probably moved from the folder its paths were written for. Give an "
                "absolute path, or one from there"
            )
    return problems
