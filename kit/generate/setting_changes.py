"""What a refused resume says changed: each setting by its params key, with its old and new value.

A run folder is bound to its identity (kit.generate.work), which holds the sampling settings and the
data section as hashes. Beside the identity, `_run.json` keeps the settings behind those hashes as
flat params keys (`generate.sampling.temperature: 0.7`), so that a refusal reads
`generate.sampling.temperature: 0.7 -> 0.9`, not two hashes. A folder made before they were kept
still names its sampling settings: every row holds the JSON of the settings it was made with.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.artifacts.manifest_sections import RunIdentity, StoredIdentity
from kit.params import RunParams
from kit.runfolder import RunFolder

HASHED = {"sampling_hash": "generate.sampling", "data_hash": "data"}
"""Identity keys that are hashes, and the params section each hashes."""
KEYS = {
    "flavor": "engine.flavor",
    "model": "model.path",
    "model_config_hash": "the model's config.json (its hash)",
    "speculative": "engine.speculative",
    "thinking": "generate.sampling.thinking",
    "tool_call_parser": "engine.tool_call_parser",
    "reasoning_parser": "engine.reasoning_parser",
}
"""The params key (or what it is) of each other identity key."""
ABSENT = "(not set)"


def identity_settings(params: RunParams) -> dict[str, Any]:
    """The settings behind the identity's hashes, as flat params keys and their values."""
    return {
        **_flat("generate.sampling", params.generate.sampling.model_dump(mode="json")),
        **_flat("data", params.data.model_dump(mode="json")),
    }


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    """`value` under `prefix` as {dotted key: leaf}; lists of sections indexed (`data.sources[0].name`)."""
    if isinstance(value, dict) and value:
        return {key: leaf for k, v in value.items() for key, leaf in _flat(f"{prefix}.{k}", v).items()}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return {key: leaf for i, v in enumerate(value) for key, leaf in _flat(f"{prefix}[{i}]", v).items()}
    return {prefix: value}


def describe_changes(
    folder: RunFolder, old: StoredIdentity, identity: RunIdentity, settings: dict[str, Any]
) -> list[str]:
    """One `key: old -> new` line per setting that differs between the folder's identity `old` and
    this run's (`identity`, with its `settings`); a hash is named as such only where the settings
    behind the old one are known neither from `_run.json` nor from the rows."""
    lines: dict[str, str] = {}
    for k in identity:
        if old.get(k) == identity[k]:
            continue
        if k in HASHED and (named := _named(folder, old, k, settings)):
            lines.update(named)
        elif k in HASHED:
            lines[k] = (
                f"{k}: {_shown(old.get(k))} -> {_shown(identity[k])} (the {HASHED[k]} section changed; "
                "this folder was made by an earlier kit, which kept only its hash)"
            )
        else:
            key = KEYS.get(k, k)
            lines.setdefault(key, f"{key}: {_shown(old.get(k))} -> {_shown(identity[k])}")
    return list(lines.values())


def _named(folder: RunFolder, old: StoredIdentity, key: str, settings: dict[str, Any]) -> dict[str, str]:
    """{params key: line} of each setting under `HASHED[key]` that differs; empty when unknown."""
    section = HASHED[key]
    was = old.get("settings")
    if was is None and key == "sampling_hash":
        was = _sampling_of_rows(folder, old.get(key))
    if was is None:
        return {}
    was = {k: v for k, v in was.items() if k.startswith(section)}
    now = {k: v for k, v in settings.items() if k.startswith(section)}
    return {
        k: f"{k}: {_shown(was.get(k, ABSENT))} -> {_shown(now.get(k, ABSENT))}"
        for k in [*now, *(k for k in was if k not in now)]
        if was.get(k, ABSENT) != now.get(k, ABSENT)
    }


def _sampling_of_rows(folder: RunFolder, digest: str | None) -> dict[str, Any] | None:
    """The sampling settings of a row made with the run's settings (hash `digest`), for a folder
    whose `_run.json` predates the settings kept beside it; None when no row says."""
    for shard in folder.shard_paths():
        try:
            table = pq.read_table(shard, columns=["sampling", "sampling_hash"])
        except (OSError, ValueError, KeyError):
            continue
        mine = table.filter(pc.equal(table["sampling_hash"], digest))
        if mine.num_rows:
            try:
                return _flat("generate.sampling", json.loads(mine["sampling"][0].as_py()))
            except (TypeError, ValueError):
                return None
    return None


def _shown(value: Any) -> str:
    return value if value == ABSENT else repr(value)
