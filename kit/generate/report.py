"""Tables for notebook 03: the prompt plan per source, the run's manifest, failures by reason."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from kit.generate.store import FailureLog
from kit.params import RunParams
from kit.runfolder import RunFolder, read_json


def plan_table(folder: RunFolder) -> pd.DataFrame:
    """Per source: requested, available, kept, and dropped by reason (from plan.json)."""
    if not folder.plan.exists():
        return pd.DataFrame()
    sources = read_json(folder.plan).get("sources") or []
    keep = ["source", "requested", "available", "kept"]
    frame = pd.DataFrame(sources)
    dropped = [c for c in frame.columns if c.startswith("dropped_") and frame[c].any()]
    return frame[[c for c in keep if c in frame] + dropped]


def failure_table(folder: RunFolder) -> pd.DataFrame:
    records = FailureLog(folder.failures).read()
    counts = Counter((r.get("source"), r.get("reason"), bool(r.get("permanent"))) for r in records)
    return pd.DataFrame(
        [{"source": s, "reason": r, "permanent": p, "requests": n} for (s, r, p), n in sorted(counts.items())]
    )


def manifest_table(folder: RunFolder) -> pd.DataFrame:
    if not folder.manifest.exists():
        return pd.DataFrame([{"field": "manifest", "value": "absent: the run has not finished"}])
    m = read_json(folder.manifest)
    keep = (
        "complete",
        "rows",
        "left",
        "failures",
        "rows_this_session",
        "shards",
        "server_restarts",
        "generating_s",
        "session_started_at",
        "finished_at",
    )
    return pd.DataFrame([{"field": k, "value": str(m.get(k))} for k in keep])


def generation_tables(params: RunParams) -> dict[str, pd.DataFrame]:
    folder = RunFolder(Path(params.run_dir))
    tables = {
        "Prompt plan": plan_table(folder),
        "Run": manifest_table(folder),
        "Failures": failure_table(folder),
    }
    return {k: v for k, v in tables.items() if not v.empty}
