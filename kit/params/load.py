"""Reading a params file: YAML (a key given twice refused) validated into `RunParams`, every bad key
named with what is allowed, every path checked (kit/params/paths.py), then relative paths resolved.

Relative paths in a params file are resolved against the directory that holds the file, so
`params/demo.yaml` can say `model: {path: ../.cache/demo/model}` and work from any working
directory (the shell, JupyterLab's `notebooks/`, papermill). Every input path that does not exist
(relative or absolute), and a folder to make that would start a new tree at the filesystem root,
is refused with its key named, all of them in one error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kit.errors import ParamsError
from kit.params.paths import path_problems
from kit.params.run_params import RunParams


def _resolve_paths(obj: Any, base: Path) -> Any:
    """Return `obj` with every relative Path field made absolute against `base`."""
    if isinstance(obj, BaseModel):
        updates = {}
        for name in type(obj).model_fields:
            value = getattr(obj, name)
            new = _resolve_paths(value, base)
            if new is not value:
                updates[name] = new
        return obj.model_copy(update=updates) if updates else obj
    if isinstance(obj, Path):
        # normpath, not resolve(): a venv's bin/python is a symlink, and following it would leave the venv
        return obj if obj.is_absolute() else Path(os.path.normpath(base / obj))
    if isinstance(obj, list) and any(isinstance(x, (Path, BaseModel)) for x in obj):
        return [_resolve_paths(x, base) for x in obj]
    return obj


def _describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(model, err["loc"][:-1])
        hint = f" (allowed here: {', '.join(allowed)})" if allowed else ""
        return f"unknown key '{loc}'{hint}"
    if err["type"] == "missing":
        return f"missing required key '{loc}'"
    got = err.get("input")
    got_s = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
    return f"'{loc}': {err['msg']}{got_s}"


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at `loc` inside `model`, walking nested sections and lists."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        candidates = [ann, *args]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if current is None:
            return []
    return sorted(getattr(current, "model_fields", {}))


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice (YAML keeps the last one silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping, naming it and both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKeyError(f"key {key!r} is given twice, on lines {seen[key]} and {line}")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_params(path: str | Path, run: str | None = None, *, check_paths: bool = True) -> RunParams:
    """Read and validate a params file; `run` overrides the run name in it.

    Raises `ParamsError` naming the file and every bad key with what is allowed, and (`check_paths`)
    every input path that does not exist (kit/params/paths.py), before anything is built or launched.
    A run folder's saved copy is read without that check: its inputs may have moved since it ran.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ParamsError(
            f"params file not found: {path}. Pass the path of a YAML file such as params/demo.yaml."
        )
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader) or {}
    except DuplicateKeyError as e:
        raise ParamsError(f"{path}: {e}; keep one of them") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping of keys at the top level, got {type(raw).__name__}")
    if run:
        raw["run"] = run
    raw.setdefault("run", path.stem)
    try:
        params = RunParams.model_validate(raw)
    except ValidationError as e:
        problems = "\n  - ".join(_describe(err, RunParams) for err in e.errors())
        raise ParamsError(f"{path}: invalid params:\n  - {problems}") from None
    if check_paths and (problems := path_problems(params, path.resolve().parent)):
        raise ParamsError(
            f"{path}: " + "\n  - ".join(["paths that are not where they should be:", *problems])
        )
    params = _resolve_paths(params, path.resolve().parent)
    return params.model_copy(update={"source_file": path.resolve()})


def saved_params(path: Path) -> RunParams | None:
    """The params a run folder saved (its params.yaml), or None when it is absent or no longer valid
    (an earlier kit's, with a key this one does not know): a view then says what it cannot tell."""
    try:
        return load_params(path, check_paths=False)
    except ParamsError:
        return None


def dump_params(params: RunParams) -> str:
    """The resolved params as YAML, as saved in the run folder."""
    data = params.model_dump(mode="json", exclude={"source_file"})
    return yaml.safe_dump(data, sort_keys=False)
