"""Safetensors facts read from file headers only (no tensor is loaded): names, shapes, dtypes, bytes."""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import TypedDict

from kit.artifacts.probe_sections import IndexSummary, SafetensorsFacts

MAX_HEADER = 100 * 1024 * 1024


class TensorEntry(TypedDict):
    """A tensor's entry in a .safetensors header, as the format defines it."""

    dtype: str
    shape: list[int]
    data_offsets: list[int]
    """[begin, end) in bytes, from the end of the header."""


@dataclass(frozen=True, slots=True)
class HeaderScan:
    """What summarize_headers read: the facts probe.json keeps, and the MTP tensors' names (for the
    MTP evidence, not written)."""

    facts: SafetensorsFacts
    mtp_tensors: list[str]


@dataclass(frozen=True, slots=True)
class ShardIndex:
    """model.safetensors.index.json as read_index reads it: the summary probe.json keeps, and the
    weight map (tensor name -> shard) that the MTP check reads."""

    summary: IndexSummary
    weight_map: dict[str, str]


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Tensor name -> {dtype, shape, data_offsets} from a .safetensors header (8-byte length + JSON)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError("file shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER:
            raise ValueError(f"header length {n} is implausible: not a safetensors file")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def is_mtp_tensor(name: str, num_layers: int | None) -> bool:
    """MTP weights: `mtp.`-prefixed names (Qwen3.5/3.6, Qwen3-Next) or decoder layers past the last
    regular one (`model.layers.61.*` in DeepSeek-V3, whose config has 61 layers)."""
    if name.startswith("mtp.") or ".mtp." in name:
        return True
    m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    return bool(m and num_layers is not None and int(m.group(1)) >= num_layers)


def summarize_headers(files: list[Path], num_layers: int | None) -> HeaderScan:
    """Parameter counts, bytes and dtypes over the headers of `files`, main weights and MTP apart."""
    params = {"main": 0, "mtp": 0}
    nbytes = {"main": 0, "mtp": 0}
    dtypes: dict[str, int] = {}
    mtp_tensors: list[str] = []
    errors: dict[str, str] = {}
    tensors = 0
    for path in files:
        try:
            header = read_header(path)
        except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            errors[path.name] = str(e)
            continue
        for name, t in header.items():
            n = prod(t["shape"])
            kind = "mtp" if is_mtp_tensor(name, num_layers) else "main"
            params[kind] += n
            nbytes[kind] += t["data_offsets"][1] - t["data_offsets"][0]
            dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + n
            tensors += 1
            if kind == "mtp":
                mtp_tensors.append(name)
    facts = SafetensorsFacts(
        files=[p.name for p in files],
        params_main=params["main"],
        params_mtp=params["mtp"],
        bytes_main=nbytes["main"],
        bytes_mtp=nbytes["mtp"],
        dtypes=dtypes,
        tensors=tensors,
        errors=errors,
        params_total=params["main"] + params["mtp"],
        dtype=max(dtypes, key=lambda d: dtypes[d]) if dtypes else None,
    )
    return HeaderScan(facts, mtp_tensors)


def read_index(model_dir: Path) -> ShardIndex | None:
    """The index summarized: shards listed, shards missing on disk, tensor names; None if absent."""
    path = model_dir / "model.safetensors.index.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        weight_map = data["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        error = f"{path.name} is unreadable ({e!r})"
        return ShardIndex(IndexSummary(error=error, shards=[], missing=[], tensors=0), {})
    shards = sorted(set(weight_map.values()))
    summary = IndexSummary(
        total_size=(data.get("metadata") or {}).get("total_size"),
        shards=shards,
        missing=[s for s in shards if not (model_dir / s).is_file()],
        tensors=len(weight_map),
    )
    return ShardIndex(summary, weight_map)
