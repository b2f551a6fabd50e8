"""A stage-2 sweep stopped part way goes on where it stopped (kit.decide.measure.journal).

The journal on its own first (what it keeps, what it sets aside, a line cut short by a kill), then
`kit decide` on the embedded demo's real `transformers serve`: interrupted with SIGINT (Ctrl-C) once
a few measurements have finished, run again and interrupted in the pilot that follows the sweep,
then run a third time: the sweep that ends keeps the first run's measurements as they were and
measures each of the rest once, and a sweep already whole is not measured again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from kit.decide.measure.journal import SweepJournal, slot_key

pytestmark = pytest.mark.timeout(600)


def _row(phase: str, rnd: int, arm: str, c: int, status: str = "ok", tok_s: float = 10.0) -> dict:
    return {
        "phase": phase,
        "round": rnd,
        "arm": arm,
        "concurrency": c,
        "status": status,
        "output_tok_s": tok_s,
    }


def test_the_journal_keeps_finished_measurements_and_counts_crashes(tmp_path: Path) -> None:
    path = tmp_path / "sweep_journal.jsonl"
    j = SweepJournal.open(path, "key-a")
    assert not j.resumed and path.exists()
    j.add(_row("start", 0, "plain", 4))
    j.add(_row("sweep", 0, "spec_k1", 1, status="crashed", tok_s=float("nan")))
    j.add(_row("sweep", 0, "spec_k1", 1))
    j.add(_row("sweep", 0, "spec_k1", 4, status="crashed"))
    j.give_up("spec_k1", "spec_k1's server died twice")
    assert j.done() == {("start", 0, "plain", 4), ("sweep", 0, "spec_k1", 1)}, "counted as they end"

    again = SweepJournal.open(path, "key-a")
    assert again.resumed and len(again.rows) == 4
    # a crashed level is not measured: it was to be measured again (or its arm given up)
    assert again.done() == {("start", 0, "plain", 4), ("sweep", 0, "spec_k1", 1)}
    assert again.crashes() == {"spec_k1": 2}
    assert again.given_up == {"spec_k1": "spec_k1's server died twice"}
    assert again.rows[1]["output_tok_s"] is None  # NaN written as null
    assert slot_key(again.rows[0]) == ("start", 0, "plain", 4)

    SweepJournal.finish(path)
    assert not path.exists()


def test_a_journal_of_other_settings_or_fresh_is_set_aside_and_a_cut_line_skipped(tmp_path: Path) -> None:
    path = tmp_path / "sweep_journal.jsonl"
    j = SweepJournal.open(path, "key-a")
    j.add(_row("sweep", 0, "plain", 1))
    with open(path, "a") as f:
        f.write('{"row": {"phase": "sweep", "rou')  # the kill came while this line was written
    assert SweepJournal.open(path, "key-a").done() == {("sweep", 0, "plain", 1)}

    other = SweepJournal.open(path, "key-b")
    assert not other.resumed
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("sweep_journal.") and p != path]
    assert len(aside) == 1 and '"key": "key-a"' in aside[0].read_text().splitlines()[0]
    assert json.loads(path.read_text().splitlines()[0])["key"] == "key-b"

    other.add(_row("sweep", 0, "plain", 1))
    assert not SweepJournal.open(path, "key-b", fresh=True).resumed
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("sweep_journal.")]) == 3, (
        "none overwritten"
    )


def _sigint_after(proc: subprocess.Popen, log: Path, mark: str, timeout: float) -> str:
    """SIGINT `proc` once the sweep log says `mark`; the log as it was then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text() if log.exists() else ""
        if mark in text:
            proc.send_signal(signal.SIGINT)
            return text
        time.sleep(0.05)
    raise AssertionError(f"no {mark!r} in {timeout:.0f} s: {log.read_text() if log.exists() else 'no log'}")


@pytest.mark.slow
def test_an_interrupt_inside_a_lines_fsync_is_counted_as_the_file_has_it(tmp_path: Path, monkeypatch) -> None:
    """SIGINT while a measurement's line is being flushed to disk: the line is written, the journal's
    memory never counted it. `kept()` says what a rerun will find (CI, 2026-12-07, on a loaded
    machine: the sweep said 2 kept beside a journal of 3)."""
    j = SweepJournal.open(tmp_path / "j.jsonl", "key")
    j.add(_row("start", 0, "plain", 4))

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("kit.decide.measure.journal.os.fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        j.add(_row("sweep", 0, "plain", 1))
    assert len(j.done()) == 1 and j.kept() == 2
    assert len(SweepJournal.open(tmp_path / "j.jsonl", "key").done()) == 2, "a rerun finds both"


def test_an_interrupted_sweep_goes_on_from_its_journal(write_params) -> None:
    path = write_params(
        "resumed",
        decide={"concurrencies": [1, 4], "repetitions": 2, "level_s": 0.5, "pilot_per_source": 1},
    )
    run = path.parent / "outputs" / "resumed"
    log, journal = run / "logs" / "sweep.log", run / "sweep_journal.jsonl"
    cmd = [sys.executable, "-m", "kit.cli", "decide", str(path)]

    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _sigint_after(first, log, "end round 0 sweep plain at 4", timeout=420)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err[-3000:]
    assert "run kit decide again with the same params to go on" in err, err[-3000:]
    lines = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    kept = [line["row"] for line in lines if "row" in line]
    assert [line["spent"]["measurements"] for line in lines if "spent" in line] == [len(kept)], (
        "the stopped run said what it had cost"
    )
    kept_slots = {(r["phase"], r["round"], r["arm"], r["concurrency"]) for r in kept}
    assert f"the sweep stopped: {len(kept_slots)} measurement(s) are kept" in err, err[-3000:]
    # the drift check and round 0 were measured before the interrupt; round 1 and the end were not
    assert {("start", 0, "plain", 4), ("sweep", 0, "plain", 1), ("sweep", 0, "plain", 4)} <= kept_slots
    assert ("end", 1, "plain", 4) not in kept_slots and not (run / "sweep_runs.parquet").exists()

    # stopped again once the sweep is whole, in the pilot that follows it (before decision.json)
    second = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _sigint_after(second, log, "pilot: ", timeout=420)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 130 and journal.exists(), err[-3000:]
    text = log.read_text()
    assert f"resumed: {len(kept_slots)} measurement(s)" in text, text
    after = text.split("resumed:", 1)[1]
    for phase, rnd, arm, c in kept_slots:  # what was kept is not measured again
        assert f"start round {rnd} {phase} {arm} at {c}\n" not in after, (phase, rnd, arm, c)
    whole = sum('"row"' in line for line in journal.read_text().splitlines()[1:])

    third = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    assert third.returncode == 0, third.stderr[-3000:]
    assert not journal.exists(), "the journal goes once decision.json is written"
    last = log.read_text().split(f"resumed: {whole} measurement(s)", 1)[1]
    assert "start round" not in last, "a sweep already whole is not measured again"

    runs = pd.read_parquet(run / "sweep_runs.parquet")
    measured = runs[runs.status == "ok"]
    slots = list(zip(measured.phase, measured["round"], measured.arm, measured.concurrency, strict=True))
    assert len(slots) == len(set(slots)), "every slot measured once"
    assert set(slots) >= kept_slots | {
        ("sweep", 1, "plain", 1),
        ("sweep", 1, "plain", 4),
        ("end", 1, "plain", 4),
    }
    by_slot = {s: tok for s, tok in zip(slots, measured.output_tok_s, strict=True)}
    for r in kept:  # the first run's figures, as it measured them
        assert by_slot[(r["phase"], r["round"], r["arm"], r["concurrency"])] == pytest.approx(
            r["output_tok_s"]
        )
    decision = json.loads((run / "decision.json").read_text())
    assert decision["noise"]["sweep_resumed"] == whole  # the last run's, which kept them all
    cost = decision["sweep_cost"]  # the three runs' together
    assert cost["runs"] == 3 and cost["measurements"] == whole and cost["server_starts"] == 3, cost
    assert any(
        r.startswith("the sweep went on from a run of it stopped part way") for r in decision["reasons"]
    )
