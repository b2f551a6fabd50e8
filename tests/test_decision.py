"""Decision: the seed's case (no MTP weights on 8 RTX PRO 6000), measured sweeps deciding, reasons."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from kit.arch import load_arch
from kit.artifacts.decision_json import EARLIER_ARM_KEYS
from kit.decide.choose.decision import decide, decision_arm, with_gpus
from kit.decide.costmodel import Hardware, Scenario, Workload
from kit.decide.measure.tables import RUN_COLUMNS, summarise
from kit.engines.arms import Arm
from kit.engines.settings import speculation
from kit.params import DecideParams

CONFIGS = Path(__file__).parent / "configs"
# Datasheets (specdec.md): RTX PRO 6000 Blackwell 96 GB, 1.79 TB/s, ~504 TF bf16; H200 141 GB, 4.8 TB/s.
RTX_PRO_6000 = Hardware(1.79e12, 504e12, 96e9, name="RTX PRO 6000 Blackwell")
H200 = Hardware(bandwidth_Bps=4.8e12, flops_bf16=989e12, memory_bytes=141e9, name="H200")


@pytest.fixture
def qwen36_without_mtp(tmp_path: Path) -> Path:
    """A model dir as the seed had it: MTP declared in config.json, no mtp.* tensors in the index."""
    shutil.copy(CONFIGS / "qwen3_6_27b.json", tmp_path / "config.json")
    shard = "model-00001-of-00001.safetensors"
    index = {"weight_map": {"model.language_model.layers.0.mlp.up_proj.weight": shard}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return tmp_path


def _runs(levels: dict[tuple[str, int, int], list], drift: tuple[float, float] | None = None) -> pd.DataFrame:
    """sweep_runs rows: {(arm, k, concurrency): [tok/s per round]} (a None is a failed level, a
    negative value a repetition that other processes disturbed), and the drift check's two
    measurements of plain at the top level (start, end)."""
    rows = []
    for (arm, k, c), values in levels.items():
        for r, v in enumerate(values):
            ok = v is not None
            rows.append(
                {"round": r, "phase": "sweep", "arm": arm, "spec_k": k, "concurrency": c,
                 "output_tok_s": abs(v) if ok else None, "status": "ok" if ok else "failed",
                 "reason": "" if ok else "server 'sweep-x' exited with code 1\nlog tail",
                 "accept_length": 1.0 + 0.3 * k if k else None, "latency_p50_s": 1.0,
                 "foreign_cpu": 0.5 if ok and v < 0 else 0.0, "disturbed": bool(ok and v < 0)}
            )  # fmt: skip
    top = max(c for _, _, c in levels)
    for phase, v in zip(("start", "end"), drift or (), strict=False):
        rows.append({"round": 0, "phase": phase, "arm": "plain", "spec_k": 0, "concurrency": top,
                     "output_tok_s": v, "status": "ok", "reason": "", "disturbed": False})  # fmt: skip
    return pd.DataFrame(rows).reindex(columns=RUN_COLUMNS)


def _sweep(rows: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sweep, runs) of levels measured once each: (arm, k, concurrency, tok/s, accept, status, reason)."""
    runs = _runs({(a, k, c): [v] for a, k, c, v, *_ in rows})
    for a, _k, c, _, accept, status, reason in rows:
        at = (runs.arm == a) & (runs.concurrency == c)
        runs.loc[at, ["accept_length", "status", "reason"]] = [accept, status, reason]
    return summarise(runs), runs


def decide_measured(sweep_runs: tuple[pd.DataFrame, pd.DataFrame], params: DecideParams, **kw) -> dict:
    sweep, runs = sweep_runs
    arch = load_arch_from(kw.pop("model", "qwen3_32b"))
    return decide(Scenario(arch, H200), sweep, params, speculation(kw.pop("flavor", "sglang"), "present"),
                  runs=runs, **kw)  # fmt: skip


def measured(levels: dict, drift: tuple[float, float] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = _runs(levels, drift)
    return summarise(runs), runs


def test_seed_case_no_mtp_weights_on_eight_rtx_pro_6000(qwen36_without_mtp: Path) -> None:
    arch = load_arch(qwen36_without_mtp)
    assert arch.mtp_layers == 1
    seed = with_gpus(Scenario(arch, RTX_PRO_6000, work=Workload(1024, 1024, 0.85)), gpu_count=8)
    params = DecideParams(concurrencies=[1, 8, 64, 256, 512], spec_steps=[1, 2, 3], accept_lengths={3: 3.2})
    d = decide(seed, None, params, speculation("sglang", "missing"))
    json.dumps(d.to_json())
    assert d["arm"] == {"k": 0, "algorithm": None} and not d["speculation_available"]
    assert "lacks their weights" in d["speculation_unavailable_reason"]
    s = d["engine_settings"]
    assert s["dp_size"] == 8 and s["tp_size"] == 1
    assert s["max_running_requests"] is None, "plain decoding: the engine's own capacity"
    worth = [r for r in d["reasons"] if "would be worth" in r and "k=3" in r]
    assert worth and "1: " in worth[0]
    spec1 = [r for r in d["table"] if r["arm"] == "spec_k3" and r["concurrency"] == 1][0]
    plain1 = [r for r in d["table"] if r["arm"] == "plain" and r["concurrency"] == 1][0]
    assert spec1["predicted_tok_s"] > 1.5 * plain1["predicted_tok_s"]


def test_a_gap_far_beyond_the_assumed_noise_counts_when_measured_once() -> None:
    """The H200 sweep of docs/lab/h200/sglang: a time budget allowed one round; n-gram k=2 made 0.34x of
    plain decoding at 256 concurrent, which the reasons once called "no measurable difference"."""
    sweep = _sweep(
        [
            ("plain", 0, 1, 190.0, None, "ok", ""),
            ("plain", 0, 256, 14319.0, None, "ok", ""),
            ("spec_k2", 2, 1, 150.0, 1.0, "ok", ""),
            ("spec_k2", 2, 256, 4906.0, 1.0, "ok", ""),
        ]
    )
    d = decide_measured(sweep, DecideParams(concurrencies=[1, 256], spec_steps=[2], repetitions=1))
    assert decision_arm(d).name == "plain" and d["measured_difference"] is True
    text = " ".join(d["reasons"])
    assert (
        "/ plain = 0.34x" in text and "outside the noise" in text and "no measurable difference" not in text
    )
    assert "±10% on each arm (±14% pooled)" in text
    runs = sweep[1]
    ends = pd.DataFrame([dict(runs[runs.concurrency == 256].iloc[0], phase=p, output_tok_s=v) for p, v in
                         (("start", 13320.0), ("end", 14595.0))])  # fmt: skip
    d = decide_measured(
        (sweep[0], pd.concat([runs, ends])),
        DecideParams(concurrencies=[1, 256], spec_steps=[2], repetitions=1),
    )
    drift = next(r for r in d["reasons"] if "at the start of the sweep" in r)
    assert "+10%" in drift and "±10%" in drift and "changed under the sweep" not in drift, drift


def test_measured_sweep_decides_and_carries_skips() -> None:
    sweep = _sweep(
        [
            ("plain", 0, 1, 40.0, None, "ok", ""),
            ("plain", 0, 256, 9000.0, None, "ok", ""),
            ("spec_k3", 3, 1, 95.0, 2.9, "ok", ""),
            ("spec_k3", 3, 256, 7900.0, 2.8, "ok", ""),
            ("spec_k1", 1, 1, None, None, "skipped", "draft tokens 2 not supported by this build"),
        ]
    )
    d = decide_measured(sweep, DecideParams(concurrencies=[1, 256], spec_steps=[1, 3], repetitions=1))
    assert d["decided_by"] == "measured" and decision_arm(d).name == "plain"
    assert not decision_arm(d).speculative
    assert d["accept_lengths"][3] == pytest.approx(2.85)
    text = " ".join(d["reasons"])
    assert "MTP k=3 / plain = 0.88x" in text and "measured once: no interval" in text
    assert "the noise could not be measured" in text, "one repetition: no noise figure, and it says so"
    assert "spec_k1 was not measured: draft tokens 2 not supported" in text
    row = [r for r in d["table"] if r["arm"] == "plain" and r["concurrency"] == 1][0]
    assert row["measured_tok_s"] == 40.0
    assert row["error_pct"] == pytest.approx(100 * (row["predicted_tok_s"] / 40.0 - 1))
    beyond = [r for r in d["table"] if r["arm"] == "plain" and r["concurrency"] == 256][0]
    assert beyond["measured_tok_s"] == 9000.0 and not beyond["feasible"]


NOISY = {  # the case: plain and n-gram k=1 a few % apart, on a machine that varies by 2x
    ("plain", 0, 16): [2275.0, 1400.0, 2600.0],
    ("spec_k1", 1, 16): [2150.0, 1500.0, 2450.0],
    ("spec_k3", 3, 16): [995.0, 700.0, 1100.0],
}


def test_arms_skipped_for_one_reason_are_one_line() -> None:
    """transformers serve skips every speculative arm for the same reason: one line names them all."""
    why = "transformers serve has no speculative decoding in its continuous-batching server"
    rows = [("plain", 0, 1, 40.0, None, "ok", ""), ("plain", 0, 16, 400.0, None, "ok", "")]
    rows += [(f"spec_k{k}", k, 1, None, None, "skipped", why) for k in (1, 2, 3)]
    d = decide_measured(
        _sweep(rows), DecideParams(concurrencies=[1, 16], spec_steps=[1, 2, 3], repetitions=1)
    )
    said = [r for r in d["reasons"] if why in r]
    assert said == [f"spec_k1, spec_k2 and spec_k3 were not measured: {why}"], d["reasons"]


def test_a_lead_inside_the_noise_keeps_the_simpler_arm_and_says_so() -> None:
    params = DecideParams(concurrencies=[16], spec_steps=[1, 3])
    d = decide_measured(measured(NOISY, drift=(2300.0, 2250.0)), params, flavor="vllm")
    assert decision_arm(d).name == "plain" and d["measured_difference"] is False
    noise = d["noise"]
    assert noise["repetitions"] == 3 and noise["noise_pct"] > 10
    assert noise["comparison"]["speculative_arm"] == "spec_k1" and not noise["comparison"]["counts"]
    assert not noise["drift"]["drifted"] and noise["disturbed"] == []
    assert (
        d["measured"]["plain"]["output_tok_s_lo"] == 1400.0
        and d["measured"]["plain"]["output_tok_s_hi"] == 2600
    )
    text = " ".join(d["reasons"])
    assert "no measurable difference" in text and "3 repetitions" in text and "no drift" not in text
    assert "cannot tell at this noise" in text  # 2,300 -> 2,250 inside a noise over 10%: not "no drift"
    assert "beats" not in text, "a measured call is never made on two medians alone"


def test_a_lead_outside_the_noise_chooses_speculation() -> None:
    steady = {("plain", 0, 16): [2000.0, 1500.0, 2100.0], ("spec_k3", 3, 16): [2600.0, 1950.0, 2750.0]}
    d = decide_measured(measured(steady), DecideParams(concurrencies=[16], spec_steps=[3]), flavor="vllm")
    assert decision_arm(d).name == "spec_k3" and d["measured_difference"] is True
    assert d["noise"]["comparison"]["lead_pct"] == pytest.approx(30.0)
    assert any("outside the noise" in r for r in d["reasons"])


def test_the_settings_stage_3_takes_are_said_in_words(tmp_path: Path) -> None:
    """`kit generate` says which settings it took from decision.json: the arm by its name and each
    setting with its value, not the raw dict it printed."""
    from kit.decide.choose.apply import applied_words, apply_decision
    from kit.params import EngineParams, ModelParams, RunParams

    steady = {("plain", 0, 16): [2000.0, 1500.0, 2100.0], ("spec_k3", 3, 16): [2600.0, 1950.0, 2750.0]}
    d = decide_measured(measured(steady), DecideParams(concurrencies=[16], spec_steps=[3]), flavor="sglang")
    params = RunParams(run="x", model=ModelParams(path=tmp_path), engine=EngineParams(flavor="sglang"))
    _, applied = apply_decision(params, d)
    words = applied_words(applied, "MTP")
    assert words.startswith("MTP k=3 (the decision's arm); ") and "{" not in words and "None" not in words
    assert f"max_running_requests {applied['max_running_requests']}" in words
    assert "speculative (algorithm MTP, num_steps 3, " in words


def test_a_disturbed_repetition_is_set_aside_and_does_not_flip_the_decision() -> None:
    """k1 leads plain by 5% in every calm round; a CPU hog in round 1 of k1 halves that repetition.
    The sweep measures that level once more (round 3, both arms: kit.decide.sweep.sweep.redo_slots); the
    hogged repetition set aside, three calm rounds remain and the lead still counts. Taken as it
    came, the hogged round would have hidden it; without the extra round, two pairs are too few."""
    calm = {("plain", 0, 16): [2000.0, 2010.0, 2050.0], ("spec_k1", 1, 16): [2100.0, 2110.0, 2150.0]}
    hog = {
        ("plain", 0, 16): [2000.0, 2010.0, 2050.0, 2030.0],
        ("spec_k1", 1, 16): [2100.0, -1000.0, 2150.0, 2135.0],
    }
    params = DecideParams(concurrencies=[16], spec_steps=[1])
    before = decide_measured(measured(calm), params, flavor="vllm")
    after = decide_measured(measured(hog), params, flavor="vllm")
    assert decision_arm(before).name == decision_arm(after).name == "spec_k1"
    assert (
        after["noise"]["disturbed"][0] | {"round": 1, "arm": "spec_k1", "foreign_cpu_pct": 50.0}
        == (after["noise"]["disturbed"][0])
    )
    assert any("round 1 of spec_k1 at 16 concurrent ran while other processes took 50%" in r
               for r in after["reasons"])  # fmt: skip
    unseen = _runs(hog).assign(disturbed=False)  # the same numbers, the hog unseen: no call made
    assert decision_arm(decide_measured((summarise(unseen), unseen), params, flavor="vllm")) == Arm(0)
    short = {k: v[:3] for k, v in hog.items()}  # no extra round: two calm pairs cannot carry a lead
    assert decision_arm(decide_measured(measured(short), params, flavor="vllm")) == Arm(0)


def test_a_lead_read_off_disturbed_measurements_keeps_plain() -> None:
    """Every repetition disturbed (a sweep beside a second whole test run, CI 2026-12-05: n-gram k=1
    chosen at 3.1x "outside the noise" off 16 disturbed repetitions): no calm ones are left to set
    them against, so the figures use them, and a lead read off them does not count; the same numbers
    calm carry it."""
    lead = {("plain", 0, 8): [200.0, 210.0, 190.0, 205.0], ("spec_k1", 1, 8): [600.0, 640.0, 580.0, 610.0]}
    params = DecideParams(concurrencies=[8], spec_steps=[1])
    calm = decide_measured(measured(lead), params, flavor="vllm")
    assert decision_arm(calm).name == "spec_k1" and calm["measured_difference"] is True
    hogged = {key: [-v for v in values] for key, values in lead.items()}
    d = decide_measured(measured(hogged), params, flavor="vllm")
    assert decision_arm(d) == Arm(0) and d["measured_difference"] is False
    assert d["noise"]["comparison"]["disturbed"] and not d["noise"]["comparison"]["counts"]
    said = [r for r in d["reasons"] if "read off disturbed measurements" in r]
    assert any(r.startswith("measured, each arm at its best") and "not counted" in r for r in said), said
    assert any(r.endswith("the simpler arm, plain decoding, is kept") for r in said), said
    one_calm = {**hogged, ("spec_k1", 1, 8): [600.0, 640.0, -580.0, -610.0]}  # plain still all disturbed
    assert decision_arm(decide_measured(measured(one_calm), params, flavor="vllm")) == Arm(0)


def test_many_disturbed_repetitions_are_one_reason_with_their_count() -> None:
    """A sweep on a busy machine: seven repetitions disturbed over two arms and two levels make one
    line of the "Why" list, not seven (a 2-core machine's read ~25 "round N ... set aside" bullets)."""
    hog = {
        ("plain", 0, 4): [1000.0, -500.0, 1010.0, -400.0, 1020.0],
        ("plain", 0, 16): [2000.0, -1000.0, 2010.0, 2030.0, 2020.0],
        ("spec_k1", 1, 4): [1100.0, -600.0, 1110.0, -500.0, 1120.0],
        ("spec_k1", 1, 16): [2100.0, -900.0, -800.0, 2110.0, 2120.0],
    }
    d = decide_measured(measured(hog), DecideParams(concurrencies=[4, 16], spec_steps=[1]), flavor="vllm")
    assert len(d["noise"]["disturbed"]) == 7
    folded = [r for r in d["reasons"] if "set aside" in r]
    assert folded == [
        "7 repetitions (plain at 4 x2, 16; spec_k1 at 4 x2, 16 x2) ran while other processes took 50% "
        "of the CPU: set aside where two undisturbed repetitions remain"
    ]
    assert not any(r.startswith("round ") for r in d["reasons"])
    noisy_ends = _runs(hog, drift=(2000.0, 2010.0))
    noisy_ends.loc[noisy_ends.phase != "sweep", ["foreign_cpu", "disturbed"]] = [[0.2, True], [0.7, True]]
    d = decide_measured(
        (summarise(noisy_ends), noisy_ends), DecideParams(concurrencies=[4, 16], spec_steps=[1])
    )
    drift = [r for r in d["reasons"] if r.startswith("the drift check")]
    assert drift == [
        "the drift check (start and end) at 16 concurrent ran while other processes took 20-70% of the CPU"
    ]


def test_the_sweep_measures_a_disturbed_level_once_more_with_every_arm() -> None:
    from kit.decide.sweep.sweep import redo_slots
    from kit.engines.arms import Arm

    arms = [Arm(0), Arm(1, "NGRAM"), Arm(3, "NGRAM")]
    rows = _runs({("plain", 0, 1): [400.0], ("plain", 0, 16): [-900.0], ("spec_k1", 1, 16): [800.0]})
    rows = rows.assign(canary_ms=3.0).to_dict("records")
    slots = redo_slots(rows, arms, together=True, next_round=3)
    assert [(s.round, s.arm.name, s.concurrency) for s in slots] == [
        (3, "spec_k3", 16), (3, "spec_k1", 16), (3, "plain", 16)
    ]  # fmt: skip
    calm = [dict(r, disturbed=False, foreign_cpu=0.0) for r in rows]
    assert redo_slots(calm, arms, together=True, next_round=3) == []


def test_measuring_again_counts_the_server_starts_it_takes(tmp_path: Path) -> None:
    """Servers one at a time, a Qwen3-32B as on the H200 (starts of ~95 s, levels of ~11 s): the
    disturbed top level measured again with both arms, then the end check, takes three restarts
    (spec -> plain -> spec -> plain), so it does not fit a 420 s budget with 291 s spent, though
    its levels alone would. Side by side (no restarts) it fits; with 120 s spent it fits."""
    from types import SimpleNamespace

    from kit.decide.measure.servers import ArmServers, Slot
    from kit.decide.measure.slots import SweepLog
    from kit.decide.sweep.rounds import fits
    from kit.engines.arms import Arm

    plain, spec = Arm(0), Arm(2, "NGRAM")
    redo = [Slot(2, plain, 256), Slot(2, spec, 256)]
    end = [Slot(1, plain, 256, "end")]
    one_at_a_time = SimpleNamespace(
        together=False, failed={}, crashed={}, up={spec.name: None}, start_s=[95.0, 95.0]
    )
    assert ArmServers.starts_for(one_at_a_time, redo + end) == 3
    assert ArmServers.starts_for(one_at_a_time, [Slot(2, spec, 256)]) == 0
    one_at_a_time.starts_for = lambda slots: ArmServers.starts_for(one_at_a_time, slots)
    log = SweepLog(tmp_path / "sweep.log")
    rows = [{}] * 9
    now = time.monotonic()
    again = "the disturbed levels are not measured again"
    assert not fits(rows, 420.0, now - 291.0, redo, end, one_at_a_time, log, again)
    assert "not measured again (about 3" in log.path.read_text()  # 3 x 11 s + 3 x 95 s
    side_by_side = SimpleNamespace(start_s=[95.0], starts_for=lambda slots: 0)
    assert fits(rows, 420.0, now - 291.0, redo, end, side_by_side, log, again)
    assert fits(rows[:2], 420.0, now - 120.0, redo[:1], [], one_at_a_time, log, again)  # a level and a start
    assert fits(rows, None, now - 10_000.0, redo, end, one_at_a_time, log, again)


def test_a_rounds_pace_leaves_out_the_first_server_start(tmp_path: Path) -> None:
    """Three servers side by side took 170 s to come up on the H200, then a round of ten levels
    ~110 s: at the second round's start (280 s in), a 400 s budget has room for it (280 + 110), which
    a pace that counted the start in every round (280 per round) refused."""
    from types import SimpleNamespace

    from kit.decide.measure.servers import Slot
    from kit.decide.measure.slots import SweepLog
    from kit.decide.sweep.rounds import fits
    from kit.engines.arms import Arm

    rows = [{}] * 10
    round_1 = [Slot(1, Arm(0), c) for c in range(9)]
    end = [Slot(1, Arm(0), 256, "end")]
    t0 = time.monotonic() - 280.0
    log = SweepLog(tmp_path / "sweep.log")
    side_by_side = SimpleNamespace(start_s=[170.0], starts_for=lambda slots: 0)
    assert fits(rows, 400.0, t0, round_1, end, side_by_side, log, "stopping after 1 round(s)")
    assert not fits(rows, 380.0, t0, round_1, end, side_by_side, log, "stopping after 1 round(s)")
    assert "time budget 380 s: stopping after 1 round(s) (about 110 s more" in log.path.read_text()


def test_drift_is_caught() -> None:
    params = DecideParams(concurrencies=[16], spec_steps=[1])
    d = decide_measured(measured(NOISY, drift=(2400.0, 1000.0)), params, flavor="vllm")
    assert d["noise"]["drift"]["drifted"] and d["noise"]["drift"]["change_pct"] == pytest.approx(
        -58.3, abs=0.1
    )
    assert any("the machine changed under the sweep" in r for r in d["reasons"])


def test_a_drift_against_a_noise_under_one_percent_prints_that_noise() -> None:
    """The H200's EAGLE-3 sweep (docs/lab/h200/sglang/eagle3-rounds2/): plain at 256 measured 12,197 then
    12,413 tok/s against a level noise of 0.14%; the reason said "beyond its ±0% noise"."""
    from kit.decide.measure.noise import Drift

    sentence = Drift(256, 12_197, 12_413, 0.0014).sentence()
    assert "(+2%, beyond its ±0.1% noise)" in sentence and "the machine changed" in sentence
    assert "within its ±4% noise): no drift" in Drift(256, 100, 101, 0.04).sentence()


def test_a_change_inside_a_wide_noise_is_not_called_no_drift() -> None:
    """The demo's decide page (issue 60): plain at 16 measured 160 then 99 tok/s (-38%) against a noise
    of ±43%. By the rule that is no drift; what a reader can conclude is that the sweep cannot tell."""
    from kit.decide.measure.noise import Drift

    sentence = Drift(16, 160, 99, 0.43).sentence()
    assert sentence.endswith(
        "(-38%, within its ±43% noise): cannot tell at this noise (a drift of up to ±43% would not show)"
    )
    assert "no drift" not in sentence


def test_a_drift_check_on_a_level_measured_once_says_its_noise_is_assumed() -> None:
    """The 22,400-prompt forecast's sweep (H100, 2026-12-08): one round, so plain at 512 had no noise
    of its own, and the reason said "(-2%, within its ±10% noise): no drift" of the assumed ±10%."""
    once = {("plain", 0, 16): [6417.0], ("plain", 0, 64): [13371.0]}
    d = decide_measured(measured(once, drift=(13488.0, 13208.0)), DecideParams(concurrencies=[16, 64]))
    line = next(r for r in d["reasons"] if r.startswith("plain decoding at 64 concurrent measured"))
    assert line.endswith("(-2%, within the ±10% assumed: the level was measured once): no drift"), line
    assert d["noise"]["drift"]["assumed"] is True
    twice = {("plain", 0, 64): [13371.0, 13300.0]}
    d = decide_measured(measured(twice, drift=(13488.0, 13208.0)), DecideParams(concurrencies=[64]))
    assert "assumed" not in next(r for r in d["reasons"] if "at the start of the sweep" in r)


def test_a_measured_fall_caps_the_batch_and_nothing_else_does() -> None:
    falls = {("plain", 0, 8): [3000.0, 2900.0, 3100.0], ("plain", 0, 64): [2000.0, 1900.0, 2050.0]}
    d = decide_measured(measured(falls), DecideParams(concurrencies=[8, 64], spec_steps=[1]), flavor="vllm")
    s = d["engine_settings"]
    assert s["max_running_requests"] == 8 and "fall" in s["max_running_requests_source"]
    rises = {("plain", 0, 8): [2000.0, 1900.0, 2050.0], ("plain", 0, 64): [3000.0, 2900.0, 3100.0]}
    d = decide_measured(measured(rises), DecideParams(concurrencies=[8, 64], spec_steps=[1]), flavor="vllm")
    assert d["engine_settings"]["max_running_requests"] is None
    assert any("full capacity" in r for r in d["reasons"])


def test_speculation_chosen_sets_explicit_running_cap_and_extra_buffer() -> None:
    arch = load_arch_from("qwen3_6_27b")
    params = DecideParams(concurrencies=[1, 4, 16], spec_steps=[3], accept_lengths={3: 3.2})
    d = decide(Scenario(arch, H200), None, params, speculation("sglang", "present"))
    s = d["engine_settings"]
    assert d["arm"] == {"k": 3, "algorithm": "MTP"} and not set(EARLIER_ARM_KEYS) & set(s), "the arm once"
    memory = [r for r in d["table"] if r["arm"] == "spec_k3"][0]["mem_max_running"]
    assert s["mamba_strategy"] == "extra_buffer" and s["max_running_requests"] == memory > 16
    assert any("lowers it to 48" in r for r in d["reasons"]), "not the sweep's top level: what memory holds"


def test_the_prediction_prices_speculation_at_the_engines_own_fixed_costs() -> None:
    """The speculative fixed costs are the engine family's (kit.decide.costmodel.engines), and its
    backend's where that was measured apart: SGLang with triton pays the per-sequence cost seen on
    the H200, so its predicted speculative arm falls behind SGLang's default at 48 concurrent (56 of
    2,048-token requests fit under MTP k=3 there: kit.memoryplan.running_capacity)."""
    from kit.decide.costmodel import engine_costs

    arch = load_arch_from("qwen3_6_27b")
    params = DecideParams(concurrencies=[1, 48], spec_steps=[3], accept_lengths={3: 3.2})

    def spec(flavor: str, backend: str | None = None) -> tuple[dict, dict]:
        d = decide(
            Scenario(arch, H200), None, params, speculation(flavor, "present"), attention_backend=backend
        )
        return d["efficiency"], {r["concurrency"]: r["predicted_tok_s"] for r in d["table"] if r["spec_k"]}

    for flavor, backend in (("sglang", None), ("sglang", "triton"), ("vllm", None)):
        eff, _ = spec(flavor, backend)
        costs = engine_costs(flavor, backend)
        assert (eff["draft_pass_s"], eff["spec_iter_s"], eff["spec_seq_s"]) == (
            costs.draft_pass_s, costs.spec_iter_s, costs.spec_seq_s
        )  # fmt: skip
    default, triton = spec("sglang")[1], spec("sglang", "triton")[1]
    assert triton[48] < 0.9 * default[48] and triton[1] == pytest.approx(default[1], rel=0.05)


def test_transformers_flavor_has_no_speculation() -> None:
    arch = load_arch_from("qwen3_32b")
    d = decide(
        Scenario(arch, H200),
        None,
        DecideParams(concurrencies=[1, 4]),
        speculation("transformers", "present"),
    )
    assert (
        decision_arm(d).name == "plain"
        and "transformers serve has no speculative" in d["speculation_unavailable_reason"]
    )


def test_latency_bound_objective_limits_concurrency() -> None:
    arch = load_arch_from("qwen3_32b")
    ladder = dict(concurrencies=[1, 16, 256], spec_steps=[3])
    loose = decide(Scenario(arch, H200), None, DecideParams(**ladder), speculation("sglang", "absent"))
    tight = DecideParams(**ladder, objective="latency_bound", latency_bound_s=18.0)
    d = decide(Scenario(arch, H200, work=Workload(1024, 1024)), None, tight, speculation("sglang", "absent"))
    assert loose["engine_settings"]["max_running_requests"] is None, "throughput: the engine's capacity"
    capped = d["engine_settings"]["max_running_requests"]
    assert capped == d["engine_settings"]["measured_at_concurrency"] < 256, "latency: the bound caps it"
    assert "latency bound" in d["engine_settings"]["max_running_requests_source"]


def load_arch_from(name: str):
    from kit.arch import arch_from_config

    return arch_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def test_a_decision_never_rests_on_nothing() -> None:
    """Unmeasured speculation wins only on a predicted lead beyond the model's known error; a measured
    lead within the noise keeps plain decoding; a failed arm never wins over a measured one."""
    from kit.decide.choose.decision import PREDICTION_ERROR, _pick_predicted

    ladder = pd.DataFrame(
        {"arm": ["plain", "spec_k3"], "spec_k": [0, 3], "concurrency": [64, 64], "feasible": [True, True]}
    )
    within = ladder.assign(output_tok_s=[1000.0, 1000.0 * (1 + PREDICTION_ERROR * 0.8)])
    choice = _pick_predicted(within, None, None, 1024, "MTP")
    assert choice["spec_k"] == 0 and "within the cost model's known error" in choice["note"]
    beyond = ladder.assign(output_tok_s=[1000.0, 1000.0 * (1 + PREDICTION_ERROR * 1.5)])
    assert _pick_predicted(beyond, None, None, 1024)["spec_k"] == 3
    assert _pick_predicted(beyond, "no MTP weights", None, 1024)["spec_k"] == 0

    params = DecideParams(concurrencies=[1, 64], spec_steps=[3], accept_lengths={3: 3.5})
    close = measured(
        {("plain", 0, 64): [1000.0, 980.0, 1030.0], ("spec_k3", 3, 64): [1010.0, 1000.0, 1020.0]}
    )
    d = decide_measured(close, params)
    assert d["decided_by"] == "measured" and decision_arm(d).name == "plain"
    assert any("no measurable difference" in r for r in d["reasons"])

    failed = _sweep(
        [
            ("plain", 0, 64, 1000.0, None, "ok", ""),
            ("spec_k3", 3, 64, None, None, "failed", "server 'sweep-spec_k3' exited with code 1\nlog tail"),
        ]
    )
    d = decide_measured(failed, params)
    assert d["decided_by"] == "measured in part" and decision_arm(d).name == "plain"
    assert d["unmeasured"] == {"spec_k3": "failed: server 'sweep-spec_k3' exited with code 1"}
    assert any("spec_k3 could not be measured (server 'sweep-spec_k3' exited" in r for r in d["reasons"])
    row = [r for r in d["table"] if r["arm"] == "spec_k3" and r["concurrency"] == 64][0]
    assert row["status"] == "failed" and row["measured_tok_s"] is None

    # an arm whose server kept dying: never chosen, its crash and what to try said whole
    why = (
        "spec_k3's server was killed by SIGKILL (exit 137) while serving: RuntimeError: The expanded size "
        "(raised in sglang/srt/layers/attention/triton_backend.py:612 in _update_target_verify_buffers); "
        "it died 2 times (decide.crash_restarts: 1), so the arm is not measured. What to try: another "
        "attention backend (engine.attention_backend)"
    )
    crashed = _sweep(
        [("plain", 0, 64, 1000.0, None, "ok", ""), ("spec_k3", 3, 64, None, None, "crashed", why)]
    )
    d = decide_measured(crashed, params)
    assert d["decided_by"] == "measured in part" and decision_arm(d).name == "plain"
    assert d["unmeasured"]["spec_k3"].startswith("crashed: spec_k3's server was killed by SIGKILL")
    assert f"spec_k3 crashed and is not chosen: {why}" in d["reasons"]
    assert not any("spec_k3 could not be measured" in r for r in d["reasons"])


def ratio_at(d: dict, k: int, c: int) -> float:
    t = pd.DataFrame(d["table"])
    plain = t[(t.spec_k == 0) & (t.concurrency == c)].predicted_tok_s.iloc[0]
    return float(t[(t.spec_k == k) & (t.concurrency == c)].predicted_tok_s.iloc[0]) / float(plain)


def check_reasons(d: dict) -> int:
    """Every reason that states a number or a verdict agrees with the decision's own figures;
    returns how many claims were checked."""
    checked = 0
    chosen_k = decision_arm(d).k
    for r in d["reasons"]:
        if m := re.match(r"chosen: (plain decoding|\S+ k=(\d+))", r):
            assert int(m[2] or 0) == chosen_k, r
            checked += 1
        if m := re.search(r"k=(\d+) / plain tokens/s by concurrency[^:]*: (.*)$", r):
            for c, x in re.findall(r"(\d+): ([\d.]+)x", m[2]):
                assert ratio_at(d, int(m[1]), int(c)) == pytest.approx(float(x), abs=0.006), r
                checked += 1
        if m := re.search(r"from concurrency (\d+) the k=(\d+) verify step .* ratio there is ([\d.]+)x", r):
            assert ratio_at(d, int(m[2]), int(m[1])) == pytest.approx(float(m[3]), abs=0.006), r
            checked += 1
        if m := re.search(
            r"crossover for k=(\d+): plain decoding matches or beats it from concurrency (\d+)", r
        ):
            k, x = int(m[1]), int(m[2])
            levels = sorted({row["concurrency"] for row in d["table"] if row["predicted_tok_s"] is not None})
            assert ratio_at(d, k, x) <= 1 and all(ratio_at(d, k, c) > 1 for c in levels if c < x), r
            checked += 1
        if m := re.search(r"predicted: \S+ k=(\d+) stays ahead of plain decoding", r):
            t = pd.DataFrame(d["table"])
            both = t[t.predicted_tok_s.notna()].groupby("concurrency").spec_k.nunique()
            assert all(ratio_at(d, int(m[1]), c) > 1 for c in both[both > 1].index if c), r
            checked += 1
        if m := re.search(r"k=\d+ / plain = ([\d.]+)x .*: (no measurable difference|outside the noise)$", r):
            comparison = d["noise"]["comparison"]
            assert comparison["ratio"]["median"] == pytest.approx(float(m[1]), abs=0.006), r
            assert (m[2] == "outside the noise") == comparison["counts"] == d["measured_difference"], r
            checked += 1
        assert not re.search(r"compute-bound, so verifying drafts is no longer free", r), r
        if m := re.search(r"the simpler arm, (plain decoding|\S+ k=(\d+)), is kept", r):
            assert int(m[2] or 0) == chosen_k, r
            checked += 1
    return checked


def test_every_reason_agrees_with_the_numbers(qwen36_without_mtp: Path) -> None:
    """The reasons of a predicted decision (the seed's case) and of measured ones, noisy and clear,
    are read claim by claim against the decision's own table and noise figures."""
    arch = load_arch(qwen36_without_mtp)
    eight = with_gpus(Scenario(arch, RTX_PRO_6000, work=Workload(1024, 1024, 0.85)), gpu_count=8)
    params = DecideParams(concurrencies=[1, 8, 64, 256, 512], spec_steps=[1, 2, 3], accept_lengths={3: 3.2})
    seed = decide(eight, None, params, speculation("sglang", "missing"))
    noisy = decide_measured(
        measured(NOISY, drift=(2300.0, 2250.0)), DecideParams(concurrencies=[16], spec_steps=[1, 3])
    )
    steady = {("plain", 0, 16): [2000.0, 1500.0, 2100.0], ("spec_k3", 3, 16): [2600.0, 1950.0, 2750.0]}
    clear = decide_measured(measured(steady), DecideParams(concurrencies=[16], spec_steps=[3]), flavor="vllm")
    counts = [check_reasons(d) for d in (seed, noisy, clear)]
    assert all(counts) and sum(counts) >= 15, counts


def test_the_arm_is_stored_once_and_an_earlier_kits_decision_still_opens() -> None:
    """decision.json holds the arm as `arm` ({"k", "algorithm"}), its name derived; a decision.json of
    the previous kit (`chosen_arm`, `engine_settings`' speculative / spec_k / algorithm /
    num_draft_tokens) reads as the same arm."""
    arm = Arm(3, "MTP")
    assert decision_arm({"arm": {"k": 3, "algorithm": "MTP"}}) == arm and arm.name == "spec_k3"
    earlier = {
        "chosen_arm": "spec_k3",
        "engine_settings": {"speculative": True, "spec_k": 3, "algorithm": "MTP", "num_draft_tokens": 4},
    }
    assert decision_arm(earlier) == arm
    plain = {"chosen_arm": "plain", "engine_settings": {"speculative": False, "spec_k": 0}}
    assert decision_arm(plain) == Arm(0) == decision_arm({"arm": {"k": 0, "algorithm": None}})
    assert decision_arm({"chosen_arm": "spec_k2", "table": []}) == Arm(2)  # a stub with the name only
    assert decision_arm(None) is None and decision_arm({"reasons": []}) is None


def test_the_sweeps_warm_up_sends_the_top_levels_prompts_at_once(tmp_path: Path) -> None:
    """On the H200 the first level measured (the drift check's, plain at 256 on flashinfer) paid for
    the engine's first 8,192-token prefill chunk: 4,883 tok/s against 12,441 at the sweep's end. The
    warm-up now sends the top level's count of the sweep's prompts at once, two tokens each, after
    the few requests of the sweep's length."""
    from types import SimpleNamespace

    from test_order import recording_server

    from kit.decide.measure.servers import WARMUP_BURST_TOKENS, WARMUP_REQUESTS, ArmServers
    from kit.engines.settings import sweep_arms
    from kit.params import RunParams
    from kit.runfolder import RunFolder

    prompts = [{"messages": [{"role": "user", "content": f"prompt {i}"}]} for i in range(3)]
    with recording_server() as (url, seen):
        params = RunParams(
            run="warm",
            output_dir=tmp_path,
            model={"path": tmp_path},
            engine={"flavor": "external", "base_url": url},
            decide={"concurrencies": [1, 4, 16], "max_tokens": 8},
        )
        arms = sweep_arms(params)
        servers = ArmServers(params, RunFolder(params.run_dir), arms, False, False, prompts)
        servers.up[arms[0].name] = SimpleNamespace(base_url=url)
        servers._warm(arms[0].name)
    budgets = [r["max_tokens"] for r in seen]
    assert budgets == [8] * WARMUP_REQUESTS + [WARMUP_BURST_TOKENS] * 16
