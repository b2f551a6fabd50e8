"""The tail of a batch job (kit.analyse.tail): measured on timelines written by stage 3's own
`Timeline` under a fake clock, with known answers; what speculation would have saved there, from
a decision ladder where speculation wins at low concurrency and loses at high."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_analyse_fixture import build_run, generation_frame  # noqa: E402

from kit.analyse import tail  # noqa: E402
from kit.analyse.load import load_metrics  # noqa: E402
from kit.artifacts import ProbeReport, TailSummary  # noqa: E402
from kit.decide.costmodel import MODEL_ERROR  # noqa: E402
from kit.display import seconds  # noqa: E402
from kit.generate import metrics  # noqa: E402
from kit.params import EngineParams, ModelParams, RunParams, dump_params  # noqa: E402
from kit.runfolder import RunFolder, write_json_atomic  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
# (t_s, in flight, rows done, output tokens done): full load (16 in flight, capacity 8) for 100 s
# at 100 tok/s, then the drain: 8 -> 4 -> 2 -> 1 -> 0 over the last 40 s
FULL = [(0.0, 0, 0, 0)] + [(10.0 * n, 16, 10 * n, 1000 * n) for n in range(1, 10)]
DRAIN = [(100.0, 8, 100, 10_000), (110.0, 4, 104, 10_300), (120.0, 2, 108, 10_450)]
DRAIN += [(130.0, 1, 110, 10_550), (140.0, 0, 112, 10_600)]
LADDER = {  # predicted tok/s: k=2 wins 2x at 1, 1.5x at 4, loses (0.75x) at 16; k=1 wins at 1 only
    0: {1: 100.0, 4: 300.0, 16: 800.0},
    1: {1: 150.0, 4: 280.0, 16: 700.0},
    2: {1: 200.0, 4: 450.0, 16: 600.0},
}


def write_timeline(
    folder: RunFolder, monkeypatch: pytest.MonkeyPatch, points: list[tuple], closing: bool = False
) -> None:
    """One session of samples through kit.generate.metrics.Timeline, at the clock times given;
    `closing`: the last point is the sample the loop takes when it stops."""
    clock = [points[0][0]]
    monkeypatch.setattr(metrics, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(metrics, "now_utc", lambda: START + timedelta(seconds=clock[0]))
    timeline = metrics.Timeline(folder.metrics, folder.metrics_log, interval_s=10.0)
    for n, (t, in_flight, rows, tokens) in enumerate(points, 1):
        clock[0] = t
        stats = SimpleNamespace(rows=rows, output_tokens=tokens, in_flight=in_flight, failures=0)
        timeline.sample(stats, {}, closing=closing and n == len(points))
    timeline.close()


def make_run(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    points: list[tuple] | None = None,
    capacity: int | None = 8,
    gpus: int = 2,
    speculative: dict | None = None,
    closing: bool = False,
) -> RunFolder:
    """A run folder with a timeline, a manifest (capacity), params.yaml (SGLang, dp 2) and probe.json."""
    folder = RunFolder(root).ensure()
    if points:
        write_timeline(folder, monkeypatch, points, closing)
    manifest = {"engine": {"flavor": "sglang", "speculative": speculative}, "complete": True}
    if capacity is not None:
        manifest.update(engine_capacity=capacity, capacity_source="SGLang /server_info")
    write_json_atomic(folder.manifest, manifest)
    write_params(folder, flavor="sglang", tp_size=1, dp_size=2)
    devices = [{"name": "NVIDIA H200"}] * gpus
    write_json_atomic(folder.probe, {"gpus": {"devices": devices}})
    return folder


def write_params(folder: RunFolder, **engine: Any) -> None:
    """params.yaml as stage 3 saves it, with these engine settings."""
    params = RunParams(run="run", model=ModelParams(path=folder.root), engine=EngineParams(**engine))
    folder.params.write_text(dump_params(params))


def decision_table(ladder: dict[int, dict[int, float]]) -> list[dict]:
    return [
        {
            "arm": f"spec_k{k}" if k else "plain",
            "spec_k": k,
            "concurrency": c,
            "predicted_tok_s": v,
            "feasible": True,
        }
        for k, by_c in ladder.items()
        for c, v in by_c.items()
    ]


def entry_of(folder: RunFolder, df: pd.DataFrame | None = None) -> TailSummary:
    m, _ = load_metrics(folder)
    frame = pd.DataFrame() if df is None else df
    return tail.tail_entry(m, frame, folder.read_manifest(), tail.TailInputs.of(folder))


def test_a_known_tail_is_measured_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_run(tmp_path / "run", monkeypatch, FULL + DRAIN)
    t = entry_of(folder)
    assert t["known"] and t["measured_from"] == "timeline" and t["sessions"] == 1
    assert (t["start_s"], t["end_s"], t["duration_s"], t["session_s"]) == (100.0, 140.0, 40.0, 140.0)
    assert t["share"] == round(40 / 140, 4)
    assert t["tok_s_full_load"] == 100.0 and t["tok_s_tail"] == 15.0  # 10,000 in 100 s; 600 in 40 s
    assert t["rows_in_tail"] == 12 and t["engine_capacity"] == 8 and t["full_load_in_flight"] == 8
    # idle share at the points (in flight clipped at 8): 0, 1/2, 3/4, 7/8, 1; trapezoids of 10 s
    idle_s = 10 * ((0 + 0.5) + (0.5 + 0.75) + (0.75 + 0.875) + (0.875 + 1)) / 2
    assert idle_s == 26.25
    assert t["idle_minutes"] == pytest.approx(idle_s * 2 / 60, abs=1e-3)  # 2 GPUs
    assert (t["devices"], t["device_unit"]) == (2, "GPU")
    assert t["speculation"]["status"] == "no decision"
    assert t["sentence"] == (
        "The tail: the last 40.0 s (29% of the run) ran below capacity (8 requests) at 15% of full-load "
        "tokens/s, leaving 0.9 GPU-minutes idle; what speculation would have saved there is unknown: "
        "decision.json is absent (stage 2 has not run)."
    )


def test_a_closing_sample_a_split_second_after_the_last_is_no_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's last sample, 0.2 s after a tick, saw the last two rows finish (300 tokens): over
    0.2 s that reads 1,500 tok/s, 15x the run's best interval. It keeps its counters (the tail counts
    its rows and tokens) and has no rates, so it is neither the peak nor drawn as a spike."""
    from kit.analyse import health, plots

    closing = (130.2, 0, 112, 10_850)
    folder = make_run(tmp_path / "run", monkeypatch, FULL + DRAIN[:-1] + [closing], closing=True)
    m, _ = load_metrics(folder)
    assert m["tok_s"].iloc[-2] == 10.0 and math.isnan(m["tok_s"].iloc[-1]) and m["rows_done"].iloc[-1] == 112
    h = health.run_health(generation_frame().iloc[:0], m, pd.DataFrame(columns=["reason"]), None)
    assert h.output_tok_s_peak == 100.0
    fig = plots.throughput(health.throughput_timeline(m, pd.DataFrame()))
    drawn = [y for ax in fig.axes for line in ax.get_lines() for y in line.get_ydata()]
    assert max(drawn) == 100.0
    t = entry_of(folder)
    assert t["end_s"] == 130.2 and t["rows_in_tail"] == 12 and t["tok_s_tail"] == round(850 / 30.2, 3)


def test_a_peak_is_a_rate_sustained_over_its_window_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 60: 'peak 616' at 3.8x the mean, one sample's rate. A burst of rows finishing within one
    10 s sample (5,000 extra tokens) is no peak of 500 tok/s: the best 60 s holds it once beside 6,000
    tokens at 100 tok/s; a run shorter than the window shows none, and says why."""
    from kit.analyse import health
    from kit.analyse.view import health_table

    burst = (
        FULL[:5]
        + [(50.0, 16, 60, 9000)]
        + [(10.0 * n, 16, 10 * n + 20, 1000 * n + 5000) for n in range(6, 13)]
    )
    m, _ = load_metrics(make_run(tmp_path / "burst", monkeypatch, burst))
    assert m["tok_s"].max() == 500.0  # the sample's own rate
    h = health.run_health(generation_frame().iloc[:0], m, pd.DataFrame(columns=["reason"]), None)
    assert h.output_tok_s_peak == pytest.approx(11_000 / 60, abs=1e-3) and h.output_tok_s_peak_window_s == 60
    m, _ = load_metrics(make_run(tmp_path / "short", monkeypatch, FULL[:5]))  # 40 s
    h = health.run_health(generation_frame().iloc[:0], m, pd.DataFrame(columns=["reason"]), None)
    said = dict(zip(*(health_table(h).frame[c] for c in ("measure", "value")), strict=True))
    assert h.output_tok_s_peak is None and said["output tok/s (peak over 1 min)"] == (
        "none: no session lasted 1 min"
    )


def test_the_tail_sentence_says_no_share_over_full_and_no_idle_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full-load phase in which few rows finished reads slower than the tail (tokens count when a
    row finishes): its share is not said. A drain of a second leaves nothing worth saying idle."""
    short_full = [(0.0, 0, 0, 0), (10.0, 8, 0, 0), (20.0, 8, 2, 100)]
    drain = [(30.0, 4, 6, 700), (40.0, 2, 8, 900), (50.0, 0, 10, 1000)]
    t = entry_of(make_run(tmp_path / "short", monkeypatch, short_full + drain))
    assert t["tok_s_tail"] == 30.0 and t["tok_s_full_load"] == 5.0  # kept in summary.json
    assert "full-load tokens/s" not in t["sentence"] and "600%" not in t["sentence"]
    assert ", leaving 0.6 GPU-minutes idle;" in t["sentence"]  # 17.5 s of 2 GPUs
    quick = FULL + [(90.5, 4, 94, 9_020), (91.0, 0, 98, 9_040)]
    t = entry_of(make_run(tmp_path / "quick", monkeypatch, quick))
    assert 0 < t["idle_minutes"] < 0.05 and "idle" not in t["sentence"]
    assert t["sentence"].startswith(
        "The tail: the last 1.0 s (1% of the run) ran below capacity (8 requests) at 40% of full-load "
        "tokens/s; what speculation"
    )


def test_a_session_that_ends_at_capacity_has_no_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_run(tmp_path / "run", monkeypatch, FULL)  # stopped (a SIGTERM) while still full
    t = entry_of(folder)
    assert t["known"] and t["duration_s"] == 0 and t["share"] == 0 and t["idle_minutes"] == 0
    assert t["start_s"] == t["end_s"] == 90.0 and t["rows_in_tail"] == 0 and "speculation" not in t
    assert t["sentence"] == (
        "The tail: none; the run ended with 16 requests in flight, at or above capacity (8 requests): "
        "nothing idled at its end."
    )


def test_unknown_capacity_uses_the_peak_in_flight_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_run(tmp_path / "run", monkeypatch, FULL + DRAIN, capacity=None)
    t = entry_of(folder)
    assert t["engine_capacity"] is None and t["full_load_in_flight"] == 16
    assert "does not say the engine's capacity" in t["full_load_source"]
    assert t["start_s"] == 90.0 and t["duration_s"] == 50.0  # the last sample at 16 in flight
    # idle share against 16: 0 (t=90), 1/2, 3/4, 7/8, 15/16, 1
    idle_s = 10 * ((0 + 0.5) + (0.5 + 0.75) + (0.75 + 0.875) + (0.875 + 0.9375) + (0.9375 + 1)) / 2
    assert t["idle_minutes"] == pytest.approx(idle_s * 2 / 60, abs=1e-3)
    assert "below the peak of 16 in flight (the engine's capacity is unknown)" in t["sentence"]


def test_a_run_that_never_filled_the_engine_is_measured_below_its_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_run(tmp_path / "run", monkeypatch, FULL + DRAIN, capacity=64)
    t = entry_of(folder)
    assert t["engine_capacity"] == 64 and t["full_load_in_flight"] == 16 and t["start_s"] == 90.0
    assert "the engine's capacity, 64, was never reached" in t["sentence"]


def test_a_missing_or_thin_timeline_is_unknown_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_run(tmp_path / "none", monkeypatch, None)
    t = entry_of(folder)
    assert t.to_json() == {
        "known": False,
        "reason": t["reason"],
        "sentence": f"The tail: unknown, because {t['reason']}.",
    }
    assert "no requests in flight" in t["reason"] and "no row has both" in t["reason"]
    thin = entry_of(make_run(tmp_path / "thin", monkeypatch, DRAIN[:3]))
    assert not thin["known"] and "3 sample(s) of requests in flight (fewer than 5)" in thin["reason"]
    assert tail.tail_figure(None, pd.DataFrame(), None) is None


def test_rows_rebuild_the_tail_where_the_timeline_is_thin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests in flight from each row's start and finish: two at once from 0 s (capacity 2); one
    finishes at 10 s, the other runs alone to 30 s."""
    folder = make_run(tmp_path / "run", monkeypatch, [(0.0, 0, 0, 0), (2.0, 2, 0, 0)], capacity=2, gpus=1)
    rows = pd.DataFrame(
        {
            "finished_at": [START + timedelta(seconds=10), START + timedelta(seconds=30)],
            "latency_s": [10.0, 30.0],
            "completion_tokens": [100, 60],
        }
    )
    t = entry_of(folder, rows)
    assert t["measured_from"] == "rows" and (t["start_s"], t["end_s"], t["share"]) == (10.0, 30.0, 0.6667)
    # each row's tokens over its life: 0-10 s holds A's 100 and 10 of B's 30 s (20), 10-30 s B's other 40
    assert t["tok_s_full_load"] == 12.0 and t["tok_s_tail"] == 2.0 and t["tok_s_from"] == "rows' lives"
    assert t["rows_in_tail"] == 2
    assert t["idle_minutes"] == pytest.approx(20 * 0.5 / 60, abs=1e-3)  # half the capacity, 20 s, 1 GPU


def test_the_tail_on_a_timeline_counts_the_tokens_generated_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 60: the demo's stage 4 page said 'output tok/s (tail, full load) 523, 135 (387%)'. The
    timeline's counter takes a row's tokens when it finishes, so a tail shorter than a request's life
    reads the answers generated before it. With the rows, each one's tokens are spread over its life:
    12 rows of 600 tokens, each running 60 s, four from 0 s, four from 40 s, four from 60 s; capacity 8,
    so the tail runs from 90 s to 120 s. In it were generated 1/6 of the middle four's tokens and half
    of the last four's (1,600 tokens in 30 s), not the 4,800 the counter took there (160 tok/s, 600% of
    its full load)."""
    points = [(10.0 * n, 4, 0, 0) for n in range(4)] + [(40.0, 8, 0, 0), (50.0, 8, 0, 0)]
    points += [(10.0 * n, 8, 4, 2400) for n in range(6, 10)] + [(100.0, 4, 8, 4800), (110.0, 4, 8, 4800)]
    folder = make_run(tmp_path / "run", monkeypatch, [*points, (120.0, 0, 12, 7200)])
    starts = [0.0] * 4 + [40.0] * 4 + [60.0] * 4
    rows = pd.DataFrame(
        {
            "finished_at": [START + timedelta(seconds=s + 60) for s in starts],
            "latency_s": [60.0] * 12,
            "completion_tokens": [600] * 12,
        }
    )
    t = entry_of(folder, rows)
    assert (t["start_s"], t["end_s"], t["tok_s_from"]) == (90.0, 120.0, "rows' lives")
    assert t["tok_s_tail"] == pytest.approx(1600 / 30, abs=1e-3)
    assert t["tok_s_full_load"] == pytest.approx(5600 / 90, abs=1e-3)
    counted = entry_of(folder)  # without rows: the counter, and it says so
    assert counted["tok_s_from"] == "finishes" and counted["tok_s_tail"] == 160.0
    from kit.analyse.view import tail_table

    said = dict(zip(*(tail_table(t).frame[c] for c in ("measure", "value")), strict=True))
    assert said["output tokens/s"] == "53.3 tok/s in the tail, 62.2 tok/s at full load (the tail at 86%)"
    # the share as the sentence says it, rounded the same way (the demo: 7% and 6.5%)
    assert said["tail duration (share)"] == "30.0 s (25% of the session)" and "(25% of the run)" in t.sentence
    said = dict(zip(*(tail_table(counted).frame[c] for c in ("measure", "value")), strict=True))
    assert said["output tokens/s"] == (
        "160 tok/s in the tail, 26.7 tok/s at full load; tokens counted as requests finished "
        "(the rows do not say when they ran)"
    )


def _hand_saving(c: float, factor: float = 1.0) -> float:
    """Seconds saved over 10 s at mean in-flight c with k=2, interpolated by hand in log(c)."""
    c = max(c, 1.0)
    lo, hi = (1, 4) if c <= 4 else (4, 16)
    u = math.log(c / lo) / math.log(hi / lo)
    plain = LADDER[0][lo] + u * (LADDER[0][hi] - LADDER[0][lo])
    spec = LADDER[2][lo] + u * (LADDER[2][hi] - LADDER[2][lo])
    return 10 * max(0.0, 1 - plain / (spec * factor))


def test_the_predicted_saving_is_the_hand_computation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_run(tmp_path / "run", monkeypatch, FULL + DRAIN)
    write_json_atomic(
        folder.decision, {"chosen_arm": "plain", "engine_settings": {}, "table": decision_table(LADDER)}
    )
    spec = entry_of(folder)["speculation"]
    assert spec["status"] == "saves" and spec["spec_k"] == 2 and spec["crossover"] == 4
    means = [6.0, 3.0, 1.5, 0.5]  # in flight 8 -> 4 -> 2 -> 1 -> 0, mean of each 10 s interval
    assert spec["saved_s"] == pytest.approx(sum(_hand_saving(c) for c in means), abs=1e-3)
    low = sum(_hand_saving(c, 1 - MODEL_ERROR) for c in means)
    high = sum(_hand_saving(c, 1 + MODEL_ERROR) for c in means)
    assert (spec["saved_low_s"], spec["saved_high_s"]) == (
        pytest.approx(low, abs=1e-3),
        pytest.approx(high, abs=1e-3),
    )
    assert 0 < low < spec["saved_s"] < high
    # stage 3's switch (kit.decide.choose.tailarm) takes the same k here: 1.5x at 4 is beyond the model's ±25%
    rule = {"would_switch": True, "k": 2, "crossover": 4, "evidence": "predicted", "ratio": 2.0}
    assert spec["switch_rule"] == rule
    said = f"{seconds(spec['saved_s'])} ({seconds(low)} to {seconds(high)}, predicted)."
    assert tail.tail_sentence(entry_of(folder)).endswith(f"MTP k=2 there would have saved {said}")
    # two servers (engine.replicas): the decision's concurrency is per server, half the in flight
    write_params(folder, flavor="sglang", replicas=2)
    two = entry_of(folder)["speculation"]
    assert two["servers"] == 2
    assert two["saved_s"] == pytest.approx(sum(_hand_saving(c / 2) for c in means), abs=1e-3)


def test_a_saving_under_a_second_is_said_by_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain of a second where speculation wins: '0.07 s (0.00 s to 2.4 s)' read as noise; the
    sentence gives the most it could have saved."""
    quick = FULL + [(90.5, 4, 94, 9_020), (91.0, 0, 98, 9_040)]
    folder = make_run(tmp_path / "run", monkeypatch, quick)
    write_json_atomic(
        folder.decision, {"chosen_arm": "plain", "engine_settings": {}, "table": decision_table(LADDER)}
    )
    spec = entry_of(folder)["speculation"]
    assert spec["status"] == "saves" and 0 < spec["saved_s"] < 1
    sentence = tail.tail_sentence(entry_of(folder))
    assert f"MTP k=2 there would have saved at most {seconds(spec['saved_high_s'])} (predicted" in sentence
    assert seconds(spec["saved_s"]) not in sentence


def test_a_predicted_win_inside_the_noise_is_said_to_be_no_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A predicted saving from a win the decision cannot tell from its noise (x1.2 < 1 + 25%): the
    sentence says stage 3's tail switch would not take it."""
    folder = make_run(tmp_path / "run", monkeypatch, FULL + DRAIN)
    ladder = {0: {1: 100.0, 4: 300.0, 16: 800.0}, 2: {1: 120.0, 4: 330.0, 16: 600.0}}
    write_json_atomic(
        folder.decision, {"chosen_arm": "plain", "engine_settings": {}, "table": decision_table(ladder)}
    )
    entry = entry_of(folder)
    assert entry["speculation"]["status"] == "saves"
    assert entry["speculation"]["switch_rule"]["would_switch"] is False
    assert (
        "generate.tail_speculation would not switch: no win outside the decision's noise"
        in tail.tail_sentence(entry)
    )


def test_no_saving_where_the_tail_runs_above_the_crossover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drain = [(100.0, 64, 100, 10_000), (110.0, 32, 104, 10_300), (120.0, 16, 108, 10_450)]
    drain += [(130.0, 16, 110, 10_550)]  # interrupted at 16 in flight: speculation loses there
    folder = make_run(tmp_path / "run", monkeypatch, FULL + drain, capacity=64)
    write_json_atomic(folder.decision, {"chosen_arm": "plain", "table": decision_table(LADDER)})
    t = entry_of(folder)
    assert t["speculation"]["status"] == "no win" and t["speculation"]["saved_s"] == 0
    assert t["sentence"].endswith(
        "MTP there would have saved nothing: no win predicted at the tail's concurrencies "
        "(k=2 wins only up to concurrency 4)."
    )


def test_a_run_that_already_speculated_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_run(
        tmp_path / "run", monkeypatch, FULL + DRAIN, speculative={"algorithm": "EAGLE", "num_steps": 2}
    )
    write_json_atomic(folder.decision, {"chosen_arm": "spec_k2", "table": decision_table(LADDER)})
    t = entry_of(folder)
    assert t["speculation"] == {"status": "already speculating", "spec_k": 2, "name": "MTP"}
    assert t["sentence"].endswith("the run already speculated there (MTP k=2).")
    manifest = json.loads(folder.manifest.read_text())
    manifest["engine"]["speculative"] = None  # plain decoding, switched to k=2 for the tail by stage 3
    write_json_atomic(
        folder.manifest, manifest | {"tail_speculation": {"enabled": True, "k": 2, "switched": True}}
    )
    switched = entry_of(folder)
    assert switched["speculation"]["status"] == "switched"
    assert switched["sentence"].endswith("the run switched to MTP k=2 for it (generate.tail_speculation).")


def test_a_cpu_run_counts_replica_minutes() -> None:
    no_gpu = ProbeReport.from_json({"gpus": {"devices": []}})
    cpu = tail.run_devices(EngineParams(flavor="vllm", replicas=2), no_gpu, None)
    assert (cpu.count, cpu.unit) == (2, "replica") and "the probe saw no GPU" in cpu.source
    eight = ProbeReport.from_json({"gpus": {"devices": [{}] * 8}})
    gpus = tail.run_devices(EngineParams(flavor="vllm", tp_size=2), eight, {"dp_size": 4})
    assert (gpus.count, gpus.unit) == (8, "GPU")


def test_the_tail_reaches_the_summary_tables_figures_and_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kit.analyse import analyse_run
    from kit.analyse.view import analysis_tables, analysis_verdict, figure_alt
    from kit.index_page import run_answers

    folder = build_run(tmp_path / "run", frame=generation_frame())
    folder.metrics.unlink()
    write_timeline(folder, monkeypatch, FULL + DRAIN)
    manifest = json.loads(folder.manifest.read_text()) | {"engine_capacity": 8}
    write_json_atomic(folder.manifest, manifest)
    summary = analyse_run(folder)
    t = json.loads(folder.summary.read_text())["tail"]
    assert (
        t["duration_s"] == 40.0
        and t["device_unit"] == "replica"
        and t["sentence"] == summary["tail"]["sentence"]
    )
    assert any(Path(p).stem == "in_flight_and_tail" for p in summary["figures"])
    assert t["sentence"] in figure_alt("in_flight_and_tail", summary)
    tables = {x.title: x for x in analysis_tables(summary)}
    assert "40.0 s (29% of the session)" in tables["The tail"].frame["value"].tolist()
    assert t["sentence"] in analysis_verdict(summary)
    # the index leaves out what speculation would have done where nothing could act on it (here: no
    # decision); the stage 4 page keeps the whole sentence
    brief = t["sentence"].split("; what speculation would have saved there is unknown")[0].rstrip(".") + "."
    assert "what speculation" in t["sentence"]
    assert {a.topic: a for a in run_answers(folder)}["Throughput"].detail.endswith(brief)
