"""The sweep's journal: every finished measurement as one JSON line, written the moment it ends, so
that a sweep stopped part way (Ctrl-C, a killed process, a machine given back) goes on where it
stopped when `kit decide` runs again with the same settings. On the H200 one round of the
Qwen3.6-27B shape's four arms (plain, MTP k = 1..3) starts four servers of ~100 s each: a sweep
with its intervals takes longer than many sessions hold a GPU.

The journal is `sweep_journal.jsonl` in the run folder; its first line names what was measured (the
sweep's key: the engine settings, the model, the measured `decide` fields, how the servers ran, the
prompts), so a journal of other settings is set aside rather than mixed in. It goes once stage 2
has written decision.json (`finish`): a later `kit decide` measures anew, as before; until then a
run stopped after the sweep (in the settings sweep, say) goes on without measuring it again. An arm given up
after its crashes is a line too, so a resumed sweep keeps its count of restarts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from kit.decide.measure.pilot import SweepPrompt
from kit.decide.measure.tables import SweepRow
from kit.params import RunParams

log = logging.getLogger(__name__)

MEASURED = ("concurrencies", "num_prompts", "requests_per_level", "max_tokens", "level_s", "repetitions")
"""The `decide` fields that change what a measurement is (spec_steps and the servers' layout come in
through the arms and `together`); the others (the time budget, the prediction's inputs) do not."""

UNSET_NEWER = {"speculative": {"adaptive"}}
"""Engine fields left out of the key: each arm spells its own (kit.engines.settings.speculative_params
clears the params' value), so they change nothing measured; an adaptive arm shows in the arms' names.
Left out, the key of a sweep is what an earlier kit made of it: its journal is still resumed."""

SlotKey = tuple[str, int, str, int]
"""(phase, round, arm, concurrency): what a measurement is in the sweep's schedule."""


class Header(TypedDict):
    """The journal's first line: the sweep's key (`sweep_key`) and when it started."""

    key: str
    started: str


class Spent(TypedDict):
    """What one run of the sweep that was stopped part way had cost when it stopped (the sweep's
    cost, decision.json's `sweep_cost`, counts every run of it)."""

    wall_s: float
    server_starts: int
    server_start_s: float
    measurements: int


class Entry(TypedDict, total=False):
    """Every later line: a measurement that ended (`row`), an arm given up (`given_up`, `why`), or
    what a stopped run had cost (`spent`)."""

    row: SweepRow
    given_up: str
    why: str
    spent: Spent


def sweep_key(
    params: RunParams, prompts: list[SweepPrompt], arms: list[str], together: bool, caps: dict
) -> str:
    """What a measurement depends on, hashed: a journal of another key is not resumed."""
    what = {
        "engine": params.engine.model_dump(mode="json", exclude=UNSET_NEWER),
        "model": str(params.model.path),
        "decide": {k: getattr(params.decide, k) for k in MEASURED},
        "arms": arms,
        "together": together,
        "running_caps": {str(k): v for k, v in sorted(caps.items())},
        "prompts": [p.get("id") for p in prompts],
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def slot_key(row: SweepRow) -> SlotKey:
    return (str(row["phase"]), int(row["round"]), str(row["arm"]), int(row["concurrency"]))


def _plain(value: Any) -> Any:
    """A row's value as JSON can hold it (numpy scalars and arrays from pandas, NaN as null)."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    elif hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass
class SweepJournal:
    """The journal of one sweep: the measurements a previous, stopped run of it finished (`rows`),
    the arms it gave up (`given_up`), and the file each new one is appended to."""

    path: Path
    key: str
    rows: list[SweepRow] = field(default_factory=list)
    given_up: dict[str, str] = field(default_factory=dict)
    spent: list[Spent] = field(default_factory=list)
    """What each earlier, stopped run of this sweep cost (a run killed outright leaves no line)."""

    @classmethod
    def open(cls, path: Path, key: str, fresh: bool = False) -> SweepJournal:
        """The journal at `path`: resumed when its key is `key`; else (or `fresh`) a new one, an
        earlier journal of other settings kept beside it under a dated name."""
        journal = cls(path, key)
        if path.exists():
            header, entries = _read(path)
            if header is not None and header.get("key") == key and not fresh:
                for entry in entries:
                    if "row" in entry:
                        journal.rows.append(entry["row"])
                    elif "given_up" in entry:
                        journal.given_up[entry["given_up"]] = entry["why"]
                    elif "spent" in entry:
                        journal.spent.append(entry["spent"])
                return journal
            aside = _aside(path)
            path.rename(aside)
            why = "--fresh" if fresh else "it measured other settings (engine, model, levels or prompts)"
            log.warning("an unfinished sweep's journal was set aside (%s): %s", why, aside)
        path.parent.mkdir(parents=True, exist_ok=True)
        _append(path, Header(key=key, started=time.strftime("%Y-%m-%dT%H:%M:%S")), mode="w")
        return journal

    @property
    def resumed(self) -> bool:
        return bool(self.rows or self.given_up)

    def done(self) -> set[SlotKey]:
        """The slots already measured. A crashed measurement is not one: its level was to be measured
        again after the restart (or its arm given up, which `given_up` says)."""
        return {slot_key(r) for r in self.rows if r.get("status") != "crashed"}

    def kept(self) -> int:
        """The measurements on disk now, as a rerun will find them: read back, not counted in memory,
        since an interrupt that lands in a line's fsync leaves the line written and not yet counted
        (CI, 2026-12-07: "2 measurement(s) are kept" beside a journal of 3, on a loaded machine)."""
        _, entries = _read(self.path) if self.path.exists() else (None, [])
        rows = [e["row"] for e in entries if "row" in e]
        return len({slot_key(r) for r in rows if r.get("status") != "crashed"})

    def crashes(self) -> dict[str, int]:
        """Crashes seen per arm, so the restarts allowed (`decide.crash_restarts`) count across runs."""
        seen: dict[str, int] = {}
        for r in self.rows:
            if r.get("status") == "crashed":
                seen[r["arm"]] = seen.get(r["arm"], 0) + 1
        return seen

    def add(self, row: SweepRow) -> None:
        """A measurement that ended: on disk at once, and counted in `done` from now on."""
        entry = _plain(row)
        _append(self.path, Entry(row=entry))
        self.rows.append(entry)

    def give_up(self, arm: str, why: str) -> None:
        _append(self.path, Entry(given_up=arm, why=why))
        self.given_up[arm] = why

    def stopped(self, spent: Spent) -> None:
        """This run stops part way: what it cost, for the run that goes on from here."""
        _append(self.path, Entry(spent=spent))

    @staticmethod
    def finish(path: Path) -> None:
        """Stage 2 is written whole: the journal at `path` goes (a later `kit decide` measures anew)."""
        path.unlink(missing_ok=True)


def _aside(path: Path) -> Path:
    """A dated name beside `path` that no earlier journal set aside has taken."""
    stamp, n = time.strftime("%Y%m%dT%H%M%S"), 0
    while (aside := path.with_name(f"{path.stem}.{stamp}{f'-{n}' if n else ''}{path.suffix}")).exists():
        n += 1
    return aside


def _append(path: Path, entry: Header | Entry, mode: str = "a") -> None:
    """One line, flushed to the disk before the sweep goes on: a kill loses at most the line being
    written, which `_read` skips."""
    with open(path, mode) as f:
        f.write(json.dumps(entry, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read(path: Path) -> tuple[Header | None, list[Entry]]:
    """(the header, the entries after it); a line cut short by a kill is skipped (None: no header)."""
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: a line cut short (the run was killed while writing it) is skipped", path)
    if not lines:
        return None, []
    return lines[0], lines[1:]
