"""The forecast's interval widened by the wall-time errors of earlier, comparable judged runs
(kit.decide.forecast.history): pinned on run folders whose decision.json, manifest.json and
summary.json the kit's own writers wrote in a tmp outputs root, each summary's `forecast_check` made
by kit.decide.forecast.check; and the pilot timed only when the time rule stopped it, on the pilots
recorded on vLLM's CPU build (docs/lab/forecast/2026-12-06-pilot-timing.json)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kit.artifacts import Decision, LadderPoint, Manifest, Summary
from kit.decide.forecast.check import forecast_check
from kit.decide.forecast.history import MIN_RUNS, judged_history, model_identity, rank_of
from kit.decide.forecast.inputs import with_history
from kit.decide.forecast.job import Ladder, calibration, pilot_ratio
from kit.params import RunParams
from kit.runfolder import RunFolder
from tests.test_forecast import RECORDED, forecast

PILOTS = Path(__file__).resolve().parent.parent / "docs/lab/forecast/2026-12-06-pilot-timing.json"


@pytest.fixture(scope="module")
def decision() -> Decision:
    """The recorded H200 sweep's decision with the forecast of a 20,000-request plan."""
    recorded = Decision.from_json(json.loads(RECORDED.read_text()))
    return replace(recorded, forecast=forecast(recorded))


def model_dir(root: Path) -> Path:
    model = root.parent / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    return model


def params(root: Path, flavor: str = "sglang") -> RunParams:
    model = model_dir(root)
    return RunParams.model_validate(
        {"run": "now", "output_dir": str(root), "model": {"path": str(model)}, "engine": {"flavor": flavor}}
    )


def past_run(
    root: Path, name: str, decision: Decision, error_pct: float | None, flavor: str = "sglang"
) -> None:
    """A finished run whose generating time was off its forecast by `error_pct` (None: not complete,
    so not judged), written as stage 2, 3 and 4 write it."""
    folder = RunFolder(root / name).ensure()
    folder.write_decision(decision)
    f = decision.forecast.arm("plain")
    actual = (f.wall_s - f.startup_s) / (1 + (error_pct or 0) / 100)
    engine = {"flavor": flavor, "model": "m", "model_config_hash": model_identity(model_dir(root))}
    manifest = Manifest.from_json(
        {"complete": error_pct is not None, "rows": 20_000, "generating_s": actual, "engine": engine}
    )
    folder.shard().write_manifest(manifest)
    check = forecast_check(decision, manifest, decision.forecast.output_tokens, None)
    folder.write_summary(Summary(rows=20_000, forecast_check=check))


def test_the_interval_holds_the_past_errors_at_their_conformal_rank(tmp_path: Path, decision) -> None:
    root = tmp_path / "outputs"
    errors = [-4.0, 12.0, -30.0, 8.0, 20.0]
    for i, e in enumerate(errors):
        past_run(root, f"past{i}", decision, e)
    past_run(root, "cut", decision, None)  # not complete: not judged, not counted
    past_run(root, "other-engine", decision, 90.0, flavor="vllm")  # another engine: not comparable
    here = RunFolder(root / "now").ensure()
    past_run(root, "now", decision, 200.0)  # this run's own earlier judgment: never counted
    history = judged_history(params(root), here, decision)
    assert history.runs == [f"past{i}" for i in range(5)]
    assert history.errors_pct == pytest.approx([4.0, 12.0, 30.0, 8.0, 20.0], abs=0.1)
    assert rank_of(5) == 5 and history.quantile() == pytest.approx(0.30, abs=1e-3)  # 5th smallest of 5

    f = with_history(decision.forecast, history)
    for before, after in zip(decision.forecast.arms, f.arms, strict=True):
        gen, start = before.wall_s - before.startup_s, before.startup_s
        assert after.wall_s == before.wall_s  # wider, not moved
        assert after.wall_hi_s - start == pytest.approx(max(before.wall_hi_s - start, gen / 0.7), abs=0.1)
        assert after.wall_lo_s - start == pytest.approx(min(before.wall_lo_s - start, gen / 1.3), abs=0.1)
        assert after.gpu_hours_hi == pytest.approx(after.wall_hi_s / 3600, abs=1e-3)
    plain = f.arm("plain")
    assert plain.wall_hi_s > decision.forecast.arm("plain").wall_hi_s  # the sweep's noise was narrower
    assert f.interval_from == "the sweep's noise and 5 judged runs' errors"
    assert f.history["judged_runs"] == 5 and f.history["error_pct"] == 30.0 and f.history["rank"] == 5
    assert f.sentence.endswith("; interval widened by 5 judged runs' errors (±30%)")

    # The actual of a run off by as much as the rank's error lies inside: 30% slow, as past2 was.
    judged = forecast_check(
        replace(decision, forecast=f),
        Manifest.from_json(
            {"complete": True, "rows": 20_000, "generating_s": (plain.wall_s - plain.startup_s) / 0.7}
        ),
        f.output_tokens,
        None,
    )
    assert judged.inside_interval and judged.wall_error_pct == pytest.approx(-30.0, abs=0.1)


def test_too_few_judged_runs_leave_the_interval_as_it_is_and_say_how_many_would_widen_it(
    tmp_path: Path, decision
) -> None:
    root = tmp_path / "outputs"
    for i, e in enumerate([50.0, -60.0, 70.0][: MIN_RUNS - 1]):
        past_run(root, f"past{i}", decision, e)
    history = judged_history(params(root), RunFolder(root / "now").ensure(), decision)
    assert len(history.runs) == MIN_RUNS - 1 == 3 and history.quantile() is None
    f = with_history(decision.forecast, history)
    assert f.arms == decision.forecast.arms
    assert f.interval_from == "the sweep's noise" and f.history["error_pct"] is None
    assert f.sentence.endswith("; interval: the sweep's noise only (3 of 4 judged runs)")


def test_a_run_with_no_history_is_unchanged_but_for_saying_so(tmp_path: Path, decision) -> None:
    root = tmp_path / "outputs"
    history = judged_history(params(root), RunFolder(root / "now").ensure(), decision)
    assert history.runs == [] and history.quantile() is None
    f = with_history(decision.forecast, history)
    assert f.arms == decision.forecast.arms and f.output_tokens == decision.forecast.output_tokens
    assert f.sentence.startswith(decision.forecast.sentence) and "(0 of 4 judged runs)" in f.sentence
    assert with_history(decision.forecast, None) == decision.forecast  # not read (an earlier kit's what-if)


@pytest.fixture(scope="module")
def pilots() -> list[dict]:
    return json.loads(PILOTS.read_text())


def recorded_pilot(run: dict) -> tuple[Ladder, dict, np.ndarray]:
    ladder = Ladder.of([LadderPoint.from_json(r) for r in run["plain_ladder"]])
    return ladder, run["pilot"], np.array(run["pilot_completion_tokens"], dtype=float)


def test_a_pilot_that_ran_out_of_prompts_is_not_timed_for_it_lasted_long_only_when_slow(pilots) -> None:
    """Four recorded pilots of vLLM's CPU build, each of the whole 210-prompt plan at 128 at once:
    over the sweep's ladder they ran at 0.85, 0.99, 1.10 and 0.90x; the old rule (at least 5 s) timed
    only the slowest (5.6 s), and that forecast came 11% too slow. Stopped by running out of prompts,
    none is timed now."""
    ratios, old, now = [], [], []
    for run in pilots:
        ladder, figures, lengths = recorded_pilot(run)
        assert figures["sent"] == run["planned_prompts"] == len(lengths) == 210
        ratios.append(round(pilot_ratio(ladder, figures, lengths), 3))
        old.append(calibration(ladder, figures, lengths))  # their figures have no `queued`: the old rule
        now.append(calibration(ladder, {**figures, "queued": run["planned_prompts"]}, lengths))
    assert ratios == pytest.approx([0.846, 0.989, 1.095, 0.897], abs=2e-3)
    assert [r["calibration"] for r in pilots] == [0.846, None, None, None]
    assert old[0] == pytest.approx(0.846, abs=1e-3) and old[1:] == [None] * 3
    assert pilots[0]["forecast_check"]["speed_error_pct"] == pytest.approx(-11.1, abs=0.1)
    assert now == [None] * 4
    stopped = {**pilots[0]["pilot"], "queued": 2048 + 24}  # the time rule stopped it: timed
    ladder, _, lengths = recorded_pilot(pilots[0])
    assert calibration(ladder, stopped, lengths) == pytest.approx(0.846, abs=1e-3)


def test_the_forecast_says_why_a_long_pilot_that_ran_out_is_not_timed(decision) -> None:
    recorded = Decision.from_json(json.loads(RECORDED.read_text()))
    lengths = np.full(210, 70.0)
    out = {"seconds": 5.6, "concurrency": 128, "answered": 210, "sent": 210, "queued": 210}
    f = forecast(recorded, pilot=out, pilot_lengths=lengths)
    assert f.calibration is None and f.arms == forecast(recorded).arms
    assert any("sent all 210 planned prompts" in n for n in f.notes)
    assert f.pilot["speed_over_sweep"] > 0  # what a calibration would have been, recorded
    stopped = forecast(recorded, pilot={**out, "queued": 400}, pilot_lengths=lengths)
    assert stopped.calibration == pytest.approx(f.pilot["speed_over_sweep"], abs=1e-3)
