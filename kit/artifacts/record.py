"""The base of the artifacts' records: frozen dataclasses read from and written to JSON.

A record reads any JSON object of its kind, from any kit: a key it does not name is kept in `extra`
and written back; a key it names that the file lacks takes its default. One read from a file writes
back exactly the keys it was read with, in their order; one a stage builds writes its fields in the
order declared (a field made with `optional()` only when it is set), which is the order the files
always had. `record["key"]` and `record.get("key")` read the JSON form, for notebook code written
against the dicts the stages returned before; the kit reads attributes. Standard library only (and
the kit's `Arm`), so that benchmarks/probe_gpu.py runs without the kit's dependencies.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar, Union

from kit.engines.arms import Arm

R = TypeVar("R", bound="Record")
OMIT_NONE = "omit_if_none"
Distribution = dict[str, float | int | None]
"""total, mean, p50, p90, max of a column (kit.analyse.tables.distribution)."""
JSONObject = dict[str, Any]
"""A JSON object whose keys belong to another part of the kit (an engine's identity, a measured
figure set): passed through as it is. An alias of `dict[str, Any]`: counted with it (issue 47)."""


def optional(default: Any = None) -> Any:
    """A field written only when set (not None): a key an artifact holds in some runs only."""
    return field(default=default, metadata={OMIT_NONE: True})


def _hints(cls: type) -> list[tuple[Field[Any], Any]]:
    cached = cls.__dict__.get("_fields_cache")
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = [(f, hints[f.name]) for f in fields(cls) if f.name not in ("extra", "read_keys")]
        cls._fields_cache = cached  # type: ignore[attr-defined]
    return cached


def _int_key(key: Any) -> Any:
    try:
        return int(key)
    except (TypeError, ValueError):
        return key


def _load(hint: Any, value: Any) -> Any:
    """`value` from JSON as the type `hint` names: records, arms, lists and dicts of them; anything
    else (or a value of an unexpected shape) as it is."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _load(args[0], value) if len(args) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json(value) if isinstance(value, Mapping) else value
    if hint is Arm:
        return arm_from_json(value) if isinstance(value, Mapping) else value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint)
        return [_load(item, v) for v in value]
    if origin is dict and isinstance(value, Mapping):
        key, item = typing.get_args(hint)
        return {(_int_key(k) if key is int else k): _load(item, v) for k, v in value.items()}
    return value


def _dump(value: Any) -> Any:
    """`value` as JSON data (records and arms as objects)."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, Arm):
        return arm_json(value)
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def arm_json(arm: Arm) -> dict[str, int | str | None]:
    """decision.json's `arm`: the draft length k (0: plain decoding) and the speculative algorithm."""
    return {"k": arm.k, "algorithm": arm.algorithm}


def arm_from_json(data: Mapping[str, Any]) -> Arm:
    k = int(data.get("k") or 0)
    return Arm(k, data.get("algorithm") if k else None)


@dataclass(frozen=True, kw_only=True)
class Record:
    """Base of the artifacts and their typed sections (see the module's docstring)."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """Keys this kit does not name (a later kit's, or a section's open-ended part), written back."""
    read_keys: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)
    """The keys of the JSON object this record was read from, in order (None: built by the kit)."""

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any] | None) -> R:
        """The record of a JSON object (None or {}: every field at its default)."""
        if isinstance(data, cls):
            return data
        data = dict(data or {})
        order = tuple(data)
        known = {}
        for f, hint in _hints(cls):
            if f.name in data:
                known[f.name] = _load(hint, data.pop(f.name))
            elif isinstance(hint, type) and issubclass(hint, Record):
                known[f.name] = hint.from_json({})  # a section the file lacks: read, with no keys
        record = cls(**known, extra=data)
        object.__setattr__(record, "read_keys", order)
        return record

    def _entries(self) -> Iterator[tuple[str, Any]]:
        """(key, value) in the order written: the keys read, or the declared fields then `extra`."""
        declared = {f.name: f for f, _ in _hints(type(self))}
        if self.read_keys is not None:
            for key in self.read_keys:
                if key in declared:
                    yield key, getattr(self, key)
                elif key in self.extra:
                    yield key, self.extra[key]
            return
        for name, f in declared.items():
            value = getattr(self, name)
            if value is None and f.metadata.get(OMIT_NONE):
                continue
            yield name, value
        yield from ((k, v) for k, v in self.extra.items() if k not in declared)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record, as its file holds it."""
        return {key: _dump(value) for key, value in self._entries()}

    # read-only access to the JSON form, as the stages' dicts gave it
    def __getitem__(self, key: str) -> Any:
        for k, value in self._entries():
            if k == key:
                return _dump(value)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self._entries())

    def keys(self) -> list[str]:
        return [k for k, _ in self._entries()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())
