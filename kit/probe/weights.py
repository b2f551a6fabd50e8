"""Safetensors facts read from file headers only (no tensor is loaded): names, shapes, dtypes, bytes."""

from __future__ import annotations

import json
import re
import struct
from math import prod
from pathlib import Path
from typing import Any

MAX_HEADER = 100 * 1024 * 1024


def read_header(path: Path) -> dict[str, dict[str, Any]]:
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


def summarize_headers(files: list[Path], num_layers: int | None) -> dict[str, Any]:
    """Parameter counts, bytes and dtypes over the headers of `files`, main weights and MTP apart."""
    out: dict[str, Any] = {
        "files": [p.name for p in files],
        "params_main": 0,
        "params_mtp": 0,
        "bytes_main": 0,
        "bytes_mtp": 0,
        "dtypes": {},
        "mtp_tensors": [],
        "tensors": 0,
        "errors": {},
    }
    for path in files:
        try:
            header = read_header(path)
        except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            out["errors"][path.name] = str(e)
            continue
        for name, t in header.items():
            n = prod(t["shape"])
            nbytes = t["data_offsets"][1] - t["data_offsets"][0]
            kind = "mtp" if is_mtp_tensor(name, num_layers) else "main"
            out[f"params_{kind}"] += n
            out[f"bytes_{kind}"] += nbytes
            out["dtypes"][t["dtype"]] = out["dtypes"].get(t["dtype"], 0) + n
            out["tensors"] += 1
            if kind == "mtp":
                out["mtp_tensors"].append(name)
    out["params_total"] = out["params_main"] + out["params_mtp"]
    out["dtype"] = max(out["dtypes"], key=out["dtypes"].get) if out["dtypes"] else None
    return out


def read_index(model_dir: Path) -> dict[str, Any] | None:
    """The index summarized: shards listed, shards missing on disk, tensor names; None if absent."""
    path = model_dir / "model.safetensors.index.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        weight_map = data["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        return {"error": f"{path.name} is unreadable ({e!r})", "weight_map": {}, "shards": [], "missing": []}
    shards = sorted(set(weight_map.values()))
    return {
        "total_size": (data.get("metadata") or {}).get("total_size"),
        "shards": shards,
        "missing": [s for s in shards if not (model_dir / s).is_file()],
        "weight_map": weight_map,
    }
