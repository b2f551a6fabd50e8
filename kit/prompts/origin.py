"""Where a source's rows came from, for plan.json's `origins` and the dataset card: the Hub dataset
id, config, split and the commit that was loaded, or each local file with the sha256 of its bytes.

    source_origin(source, dataset)
    # {"hub": "BAAI/Infinity-Instruct", "config": "0625", "split": "train", "revision": "<commit>"}
    # {"builder": "json", "files": [{"path": "/data/a.jsonl", "sha256": "<64 hex digits>"}]}
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from kit.params import SourceParams
from kit.params.paths import LOCAL_BUILDERS
from kit.prompts.datafiles import local_files
from kit.prompts.records import FilesOrigin, HubOrigin, OriginFile, SourceOrigin

COMMIT = re.compile(r"[0-9a-f]{40}")


def source_origin(source: SourceParams, dataset: Any | None = None) -> SourceOrigin:
    """The origin of `source`; `dataset`, what `datasets.load_dataset` returned for it, names the Hub
    commit it read (None: the revision is not known)."""
    if source.dataset in LOCAL_BUILDERS:
        files = [
            OriginFile(path=str(p), sha256=file_sha256(p) if p.is_file() else None)
            for p in local_files(source)
        ]
        return FilesOrigin(builder=source.dataset, files=files)
    origin = HubOrigin(
        hub=source.dataset,
        config=source.config,
        split=source.split,
        data_files=[str(f) for f in source.data_files or []],
        revision=hub_revision(dataset),
    )
    if not source.data_files:  # the key only where the params give data files
        del origin["data_files"]
    return origin


def hub_revision(dataset: Any | None) -> str | None:
    """The commit of the Hub dataset that was loaded: from the data files `datasets` resolved
    (`hf://datasets/<id>@<commit>/...`), else from its cache folder (named after the commit)."""
    info = getattr(dataset, "info", None)
    for url in getattr(info, "download_checksums", None) or {}:
        if found := re.search(r"@([0-9a-f]{40})/", str(url)):
            return found.group(1)
    for entry in getattr(dataset, "cache_files", None) or []:
        commits = [part for part in Path(entry.get("filename", "")).parts if COMMIT.fullmatch(part)]
        if commits:
            return commits[-1]
    return None


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()
