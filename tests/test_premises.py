"""Stage 2's premises re-checked live (kit.generate.premises): accept length, capacity, throughput
against decision.json, each ok and contradicted, warned once; warm-up and tail ignored; what
cannot be checked says why; a saved timeline re-checked as the live run would have."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_decision import H200, _runs, decide_measured, load_arch_from, measured

from kit.artifacts import Decision
from kit.decide.choose.decision import decide
from kit.decide.costmodel import Scenario
from kit.decide.measure.tables import summarise
from kit.engines.capacity import Capacity
from kit.engines.settings import speculation
from kit.generate.metrics import load_timeline
from kit.generate.premise_kinds import ACCEPT_MARGIN, GRACE_S, THROUGHPUT_WINDOW_S
from kit.generate.premises import WARMUP_S, PremiseCheck, check_timeline, session_total
from kit.generate.timeline_sample import TimelineSample
from kit.params import DecideParams, EngineParams, ModelParams, RunParams, SpeculativeParams

CAP = 64
START = datetime(2026, 12, 1, tzinfo=timezone.utc)
# MTP k=3 beats plain outside the noise at 64 concurrent; both arms measured at 8 and 64, 3 rounds
LEVELS = {
    ("plain", 0, 8): [2000.0, 1900.0, 2100.0],
    ("plain", 0, 64): [9000.0, 8500.0, 9400.0],
    ("spec_k3", 3, 8): [2600.0, 2500.0, 2750.0],
    ("spec_k3", 3, 64): [11000.0, 10500.0, 11600.0],
}


def _json(d: Decision) -> Decision:
    """decision.json as stage 3 reads it back (folder.read_decision: int keys become strings, NaN None)."""
    return Decision.from_json(json.loads(json.dumps(d.to_json())))


@pytest.fixture(scope="module")
def spec_decision() -> Decision:
    """MTP k=3 chosen; the sweep measured its accept length 2.1 at 8 concurrent and 2.6 at 64."""
    runs = _runs(LEVELS)
    runs.loc[runs.arm == "spec_k3", "accept_length"] = [2.1 if c == 8 else 2.6 for c in
                                                        runs[runs.arm == "spec_k3"].concurrency]  # fmt: skip
    params = DecideParams(concurrencies=[8, 64], spec_steps=[3])
    d = _json(decide_measured((summarise(runs), runs), params, flavor="vllm"))
    assert d["arm"] == {"k": 3, "algorithm": "MTP"}
    return d


@pytest.fixture(scope="module")
def once_decision() -> Decision:
    """Plain decoding measured once per level: no interval of its own, no noise figure."""
    once = {key: v[:1] for key, v in LEVELS.items() if key[0] == "plain"}
    d = _json(decide_measured(measured(once), DecideParams(concurrencies=[8, 64], spec_steps=[3])))
    assert d["noise"]["noise_pct"] is None
    return d


def job(
    total: int = 20_000,
    cap: int = CAP,
    tok_s: float = 11_000.0,
    row_tokens: int = 500,
    dt: float = 2.0,
    session: int = 1,
    **over: Callable[[float, int], Any] | float,
) -> list[dict[str, Any]]:
    """Timeline samples (Timeline.sample's keys) every `dt` s of a session that runs `total` rows
    with `cap` running at `tok_s`, then drains. `over`: a gauge or figure, a constant or a function
    of (t_s, rows remaining), in place of the simulated one (running, queued, in_flight, tok_s,
    accept_length, ...)."""

    def value(key: str, t: float, left: int, default: Any) -> Any:
        v = over.get(key, default)
        return v(t, left) if callable(v) else v

    if callable(tok_s):  # a rate that changes over the run
        over["tok_s"], tok_s = tok_s, 11_000.0
    samples, done, tokens, t = [], 0.0, 0.0, 0.0
    while True:
        left = total - int(done)
        full = min(cap, left)
        rate = value("tok_s", t, left, tok_s * full / cap)
        row = {
            "session": session, "at": START + timedelta(seconds=t), "t_s": t, "rows_done": int(done),
            "output_tokens_done": int(tokens),
            "rows_s": rate / row_tokens, "tok_s": rate, "failures": 0,
            "in_flight": value("in_flight", t, left, min(2 * cap, left)),
            "num_running_reqs": value("running", t, left, full),
            "num_queue_reqs": value("queued", t, left, min(cap, left - full)),
        }  # fmt: skip
        for key in ("accept_length", "server_restarts", "servers_restarting"):
            if key in over:
                row[key] = value(key, t, left, None)
        samples.append(row)
        if left <= 0:
            return samples
        done, tokens, t = min(total, done + rate * dt / row_tokens), tokens + rate * dt, t + dt


def run(check: PremiseCheck, samples: list[dict[str, Any]]) -> list[str]:
    """Every warning the samples raise, as the loop would log them (with the loop's restart figures)."""
    warnings = []
    for s in samples:
        sample = TimelineSample.from_row(s)
        warnings += check.observe(sample, s.get("servers_restarting"), s.get("server_restarts"))
    return warnings


def spec_check(decision: Decision | None, **kw: Any) -> PremiseCheck:
    return PremiseCheck(decision, kw.pop("capacity", CAP), kw.pop("spec_k", 3), total=kw.pop("total", 20_000),
                        **kw)  # fmt: skip


# ---- (a) accept length ----------------------------------------------------------------------
def test_accept_length_inside_the_sweeps_range_is_ok(spec_decision: Decision) -> None:
    check = spec_check(spec_decision)
    assert run(check, job(accept_length=2.3)) == []
    a = check.report()["premises"]["accept_length"]
    assert a["checked"] and a["status"] == "ok" and a["why_not"] is None and a["checks"] > 100
    assert a["last"]["sweep_lo"] == 2.1 and a["last"]["sweep_hi"] == 2.6
    assert a["last"]["expected_lo"] == pytest.approx(2.1 * (1 - ACCEPT_MARGIN))
    assert a["last"]["sweep_levels"] == {8: 2.1, 64: 2.6}


def test_accept_length_below_the_sweep_warns_once_with_what_to_do(spec_decision: Decision) -> None:
    check = spec_check(spec_decision)
    warnings = run(check, job(accept_length=lambda t, _: 2.3 if t < 300 else 1.4))
    assert len(warnings) == 1, "each premise is warned about once per run"
    w = warnings[0]
    assert w.startswith("accept length 1.40 (median over the last")
    assert "below the sweep's 2.10-2.60 for MTP k=3 (±5%)" in w and "rerun kit decide on a sample" in w
    a = check.report()["premises"]["accept_length"]
    assert a["status"] == "contradicted" and a["warning"] == w
    assert 300 < a["first_contradicted_t_s"] < 300 + 60 and a["first_contradicted_session"] == 1
    assert a["first_contradicted_at"] == (START + timedelta(seconds=a["first_contradicted_t_s"])).isoformat()
    assert a["first_contradiction"]["accept_length"] == 1.4 and a["contradicted_checks"] > 1
    assert check.report()["warnings"] == [w]


def test_accept_length_above_the_sweep_says_a_longer_draft_may_pay(spec_decision: Decision) -> None:
    (w,) = run(spec_check(spec_decision), job(accept_length=3.5))
    assert "3.50" in w and "above the sweep's 2.10-2.60" in w and "decide.spec_steps" in w


def test_a_gauge_summed_over_engines_is_divided_or_set_aside(spec_decision: Decision) -> None:
    """SGLang's accept-length gauge summed over 2 data-parallel ranks reads twice the mean."""
    assert run(spec_check(spec_decision, accept_length_ranks=2), job(accept_length=4.6)) == []
    check = spec_check(spec_decision)
    assert run(check, job(accept_length=4.6)) == [], "4.6 is not an accept length for k=3"
    a = check.report()["premises"]["accept_length"]
    assert a["status"] == "not checked" and "outside 1-4" in a["why_not"]


def test_accept_length_is_not_checked_for_plain_decoding_or_without_measurements(
    spec_decision: Decision, once_decision: Decision
) -> None:
    plain = spec_check(spec_decision, spec_k=0).report()["premises"]["accept_length"]
    assert plain["why_not"] == (
        "not checked because the run decodes without speculation (plain decoding has no accept length)"
    )
    unmeasured = spec_check(once_decision).report()["premises"]["accept_length"]
    assert "the sweep did not measure spec_k3" in unmeasured["why_not"]
    silent = spec_check(spec_decision)
    run(silent, job())  # the engine reports no accept length
    a = silent.report()["premises"]["accept_length"]
    assert not a["checked"] and a["why_not"] == (
        "not checked because the engine reported no accept length in a steady sample"
    )


# ---- (b) capacity -----------------------------------------------------------------------------
def dip(start: float, length: float, running: float, **more: float) -> dict[str, Callable]:
    """Gauges that fall to `running` (and `more`) from `start` for `length` seconds."""

    def inside(t: float) -> bool:
        return start <= t < start + length

    normal = {
        "running": lambda left: min(CAP, left),
        "queued": lambda left: min(CAP, left - min(CAP, left)),
        "in_flight": lambda left: min(2 * CAP, left),
    }
    return {
        key: lambda t, left, v=v, key=key: v if inside(t) else normal[key](left)
        for key, v in {"running": running, **more}.items()
    }


def test_the_engine_at_capacity_is_ok_and_short_dips_are_forgiven(spec_decision: Decision) -> None:
    check = spec_check(spec_decision)
    assert run(check, job(**dip(200, GRACE_S - 10, running=30))) == [], "shorter than the grace"
    b = check.report()["premises"]["capacity"]
    assert b["checked"] and b["status"] == "ok" and b["last"]["capacity"] == CAP


def test_an_engine_that_admits_fewer_than_its_capacity_is_said_with_its_queue(
    spec_decision: Decision,
) -> None:
    check = spec_check(spec_decision, capacity_source="SGLang /server_info")
    (w,) = run(check, job(**dip(200, 120, running=40, queued=88)))
    assert (
        w.startswith("the engine ran 40 requests for 3") and "its capacity is 64 (SGLang /server_info)" in w
    )
    assert "with 88 waiting in it" in w and "engine.max_running_requests to about 40" in w
    b = check.report()["premises"]["capacity"]
    assert b["status"] == "contradicted" and 200 + GRACE_S <= b["first_contradicted_t_s"] <= 200 + GRACE_S + 2
    e = b["first_contradiction"]
    assert e["running_median"] == 40 and e["below_samples"] >= 3 and e["below_for_s"] >= GRACE_S


def test_a_client_that_sends_too_few_is_said_to_starve_the_engine(spec_decision: Decision) -> None:
    (w,) = run(spec_check(spec_decision), job(**dip(200, 120, running=20, queued=0, in_flight=20)))
    assert "with only 20 in flight from the kit: the client starved the engine" in w
    (w,) = run(spec_check(spec_decision), job(**dip(200, 120, running=20, queued=0, in_flight=128)))
    assert "with 128 in flight from the kit but none waiting in the engine" in w


def test_warm_up_and_tail_are_not_judged(spec_decision: Decision) -> None:
    """Nothing runs in the first seconds, the last rows drain slowly: neither is a contradiction."""

    def warm_or_tail(steady: float, slow: float) -> Callable[[float, int], float]:
        return lambda t, left: slow if t < WARMUP_S or left < CAP else steady

    samples = job(
        running=warm_or_tail(CAP, 2), tok_s=warm_or_tail(11_000, 40), accept_length=warm_or_tail(2.3, 1.0)
    )
    check = spec_check(spec_decision)
    assert run(check, samples) == []
    r = check.report()
    assert r["samples"]["warm_up"] == WARMUP_S / 2 and r["samples"]["tail"] > 50
    assert {p["status"] for p in r["premises"].values()} == {"ok"}
    middle = {  # the same collapse in mid-run is seen at once
        "running": lambda t, left: 2 if 400 <= t < 600 else CAP,
        "tok_s": lambda t, left: 40.0 if 400 <= t < 600 else 11_000.0,
    }
    assert len(run(spec_check(spec_decision), job(**middle))) == 2


def test_capacity_unknown_is_not_checked(spec_decision: Decision) -> None:
    check = PremiseCheck(
        spec_decision, None, 3, total=20_000, capacity_source="the external server does not say"
    )
    run(check, job(running=5))
    b = check.report()["premises"]["capacity"]
    assert (
        b["why_not"]
        == "not checked because the engine's capacity is unknown (the external server does not say)"
    )


# ---- (c) throughput ---------------------------------------------------------------------------
def test_throughput_inside_the_interval_at_the_nearest_level_is_ok(spec_decision: Decision) -> None:
    check = spec_check(spec_decision)
    assert run(check, job(tok_s=11_200.0)) == []
    c = check.report()["premises"]["throughput"]
    assert c["status"] == "ok" and c["last"]["sweep_concurrency"] == 64
    assert (c["last"]["sweep_lo"], c["last"]["sweep_hi"]) == (10_500.0, 11_600.0)
    assert c["last"]["tok_s"] == pytest.approx(11_200, rel=0.02) and c["last"]["window_s"] >= 300


def test_throughput_below_the_interval_warns_once_naming_the_level(spec_decision: Decision) -> None:
    check = spec_check(spec_decision)
    (w,) = run(check, job(tok_s=lambda t, left: 11_000.0 * min(CAP, left) / CAP if t < 300 else 8_000.0))
    assert w.startswith("throughput 10") and "tok/s per server (last 300 s, about 64 running)" in w
    assert "below the sweep's 10500-11600 for MTP k=3 at 64 concurrent:" in w and "rerun kit decide" in w
    c = check.report()["premises"]["throughput"]
    assert c["status"] == "contradicted" and c["last"]["tok_s"] == pytest.approx(8_000)
    assert 300 + THROUGHPUT_WINDOW_S / 6 <= c["first_contradicted_t_s"] <= 300 + THROUGHPUT_WINDOW_S / 6 + 4


def test_a_nearby_concurrency_scales_the_bound_on_its_side(spec_decision: Decision) -> None:
    """100 running beside the level of 64 (1.56x): up to 1.56x the level's top is expected, and
    no less than its bottom."""
    check = spec_check(spec_decision, capacity=100)
    assert run(check, job(cap=100, tok_s=15_000.0)) == []
    e = check.report()["premises"]["throughput"]["last"]
    assert e["expected_hi"] == pytest.approx(11_600 * 100 / 64, rel=0.01) and e["expected_lo"] == 10_500
    (w,) = run(spec_check(spec_decision, capacity=100), job(cap=100, tok_s=9_000.0))
    assert "scaled to 10500-18125 for the run's 1.56x concurrency" in w


def test_a_run_far_from_every_measured_level_is_not_compared(spec_decision: Decision) -> None:
    check = spec_check(spec_decision, capacity=1024, total=60_000)
    assert run(check, job(cap=1024, tok_s=30_000.0, total=60_000)) == []
    c = check.report()["premises"]["throughput"]
    assert c["status"] == "not checked" and "nearest level of MTP k=3 is 64 (16.0x off)" in c["why_not"]
    assert "beyond the 2x within which a level is compared" in c["why_not"]


def test_a_level_measured_once_takes_the_assumed_noise(once_decision: Decision) -> None:
    check = PremiseCheck(once_decision, CAP, 0, total=20_000)
    assert run(check, job(tok_s=9_500.0)) == [], "9000 measured once: ±10%"
    e = check.report()["premises"]["throughput"]["last"]
    assert e["sweep_widened"] == "measured once: ±10% (assumed noise)" and e["expected_hi"] == 9_900
    assert len(run(PremiseCheck(once_decision, CAP, 0, total=20_000), job(tok_s=10_500.0))) == 1


def test_replicas_compare_per_server(spec_decision: Decision) -> None:
    """Two servers: the sweep measured one, so the run's tokens/s and running are halved."""
    check = spec_check(spec_decision, capacity=128, replicas=2)
    assert run(check, job(cap=128, tok_s=22_000.0)) == []
    assert check.report()["premises"]["throughput"]["last"]["concurrency"] == 64


# ---- the decision missing or partial ----------------------------------------------------------
def test_no_decision_checks_capacity_and_says_why_not_the_rest() -> None:
    check = PremiseCheck(None, CAP, 3, total=20_000)
    assert run(check, job(accept_length=2.3)) == []
    r = check.report()["premises"]
    because = "not checked because there is no decision.json"
    assert r["accept_length"]["why_not"].startswith(because) and r["throughput"]["why_not"].startswith(
        because
    )
    assert r["capacity"]["status"] == "ok"
    assert check.unchecked[0].startswith("premise accept_length is not checked because there is no")


def test_a_predicted_decision_and_an_old_one_say_what_they_lack(spec_decision: Decision) -> None:
    arch = load_arch_from("qwen3_32b")
    params = DecideParams(concurrencies=[1, 64], spec_steps=[3], accept_lengths={3: 3.5})
    predicted = _json(decide(Scenario(arch, H200), None, params, speculation("sglang", "present")))
    r = PremiseCheck(predicted, CAP, 3).report()["premises"]
    assert "stage 2 decided on predictions" in r["throughput"]["why_not"]
    old = Decision.from_json({k: v for k, v in spec_decision.to_json().items() if k != "table"})
    assert (
        "has no table of measured levels"
        in PremiseCheck(old, CAP, 3).report()["premises"]["accept_length"]["why_not"]
    )


# ---- report, restarts, a saved timeline -------------------------------------------------------
def test_the_report_says_each_premise_and_the_arm(spec_decision: Decision) -> None:
    check = spec_check(spec_decision)
    run(check, job(accept_length=2.3))
    r = check.report()
    assert r["arm"] == "spec_k3" and r["arm_label"] == "MTP k=3" and r["arm_is_decision"] is True
    assert r["engine_capacity"] == CAP and r["warnings"] == []
    for p in r["premises"].values():
        assert {"checked", "status", "why_not", "rule", "first_contradicted_t_s", "last"} <= set(p)
        assert p["rule"]
    json.dumps(r)
    assert PremiseCheck(spec_decision, CAP, 0).report()["arm_is_decision"] is False


def test_a_server_restart_warms_up_again(spec_decision: Decision) -> None:
    """A replica restarting (100 s without gauges nor tokens, then 40 s admitting its queue again)
    is no contradiction where the sample says so (`servers_restarting`, `server_restarts`)."""

    def outage(during: Any, ramp: Any, after: Callable[[int], Any]) -> Callable[[float, int], Any]:
        return lambda t, left: during if 300 <= t < 400 else ramp if 400 <= t < 440 else after(left)

    samples = job(
        running=outage(None, 10, lambda left: min(CAP, left)),
        queued=outage(None, 118, lambda left: min(CAP, left - min(CAP, left))),
        tok_s=outage(0.0, 2_000.0, lambda left: 11_000.0 * min(CAP, left) / CAP),
        servers_restarting=outage(1, 0, lambda left: 0),
    )
    assert run(spec_check(spec_decision), samples) == []
    counted = [{**s, "servers_restarting": None, "server_restarts": int(s["t_s"] >= 300)} for s in samples]
    assert run(spec_check(spec_decision), counted)[0].startswith("the engine ran 10 requests for 3"), (
        "the restart's start alone: its 100 s outage is not warm-up, the queue admitted after it is"
    )
    unsaid = [{k: v for k, v in s.items() if k != "servers_restarting"} for s in samples]
    assert len(run(spec_check(spec_decision), unsaid)) == 2, "unsaid, it reads as starved and slow"


def test_a_saved_timeline_is_rechecked_as_the_live_run_was(spec_decision: Decision, tmp_path: Path) -> None:
    """Two sessions (a resume): each warms up and drains; the warning is given once."""
    slow = job(total=8_000, session=1, accept_length=1.4)
    resumed = job(total=12_000, session=2, accept_length=1.4, running=lambda t, left: None if t < 40 else CAP)
    pd.DataFrame(slow + resumed).sample(frac=1.0, random_state=0).to_parquet(tmp_path / "metrics.parquet")
    frame = load_timeline(tmp_path / "metrics.parquet")  # shuffled: the order is restored; gauges NaN
    assert session_total(frame[frame.session == 2].sort_values("t_s")) == 12_000
    report = check_timeline(frame, spec_decision, CAP, 3)
    live = spec_check(spec_decision)
    live.total = 8_000
    run(live, slow)
    live.total = 12_000
    run(live, resumed)
    assert report == live.report()
    json.dumps(report)  # numbers from a DataFrame are plain floats and ints, fit for manifest.json
    assert (
        len(report["warnings"]) == 1
        and report["premises"]["accept_length"]["first_contradicted_session"] == 1
    )
    assert report["samples"]["warm_up"] == 2 * (WARMUP_S / 2)
    empty = check_timeline(pd.DataFrame(), spec_decision, CAP, 3)
    assert empty["premises"]["throughput"]["why_not"].startswith("not checked because no steady window")


def test_for_run_takes_the_arm_and_the_gauges_from_the_params(spec_decision: Decision) -> None:
    engine = EngineParams(flavor="sglang", dp_size=2, replicas=2,
                          speculative=SpeculativeParams(algorithm="NGRAM", num_steps=3))  # fmt: skip
    params = RunParams(run="x", model=ModelParams(path="/nonexistent"), engine=engine)
    check = PremiseCheck.for_run(spec_decision, params, Capacity(256, "SGLang /server_info"), total=1000)
    assert (check.spec_k, check.replicas, check.accept_length_ranks, check.capacity) == (3, 2, 4, 256)
    assert check.label == "n-gram k=3" and check.total == 1000
    plain = RunParams(run="x", model=ModelParams(path="/nonexistent"), engine=EngineParams(flavor="vllm"))
    assert PremiseCheck.for_run(None, plain, Capacity(None, "?"), 10).spec_k == 0
