"""Stage 2's settings sweep (`decide.backends`: kit.decide.checks.settings_sweep, .settings_choice).

The choosing rule on tables first (a lead outside the noise wins, one inside keeps the params' own,
a setting the params set is kept, a server that would not start is named), the spelling per flavor
and the params' refusals, then `kit decide` on the embedded demo's real `transformers serve` with
its attention implementation measured against the default.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kit.artifacts import Decision, EngineSettings
from kit.decide.checks.settings_choice import backend_reasons, decide_backends, judge_backends
from kit.decide.checks.settings_sweep import BASELINE, Alternative, BackendSweep, alternatives, backend_slots
from kit.decide.choose.apply import apply_decision
from kit.engines.arms import Arm
from kit.engines.flavors import server_command
from kit.engines.settings import apply_settings
from kit.errors import ParamsError
from kit.params import RunParams, load_params

pytestmark = pytest.mark.timeout(600)

BASE = Alternative(0)
PYTORCH = Alternative(0, None, "sampling_backend", "pytorch")
TRITON = Alternative(0, None, "attention_backend", "triton")


def _runs(figures: dict[str, list[float]], disturbed: bool = False) -> pd.DataFrame:
    """The settings sweep's measurements: {server name: tok/s per round}."""
    rows = [
        {
            "arm": name,
            "phase": "sweep",
            "round": r,
            "concurrency": 64,
            "status": "ok",
            "output_tok_s": v,
            "disturbed": disturbed,
        }
        for name, values in figures.items()
        for r, v in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_a_lead_outside_the_noise_wins_and_one_inside_keeps_the_params_own() -> None:
    runs = _runs(
        {
            BASELINE: [1000, 1010, 990],
            PYTORCH.name: [810, 820, 800],  # slower outside the noise
            TRITON.name: [1220, 1230, 1210],  # faster outside the noise
        }
    )
    own = {"sampling_backend": "flashinfer", "attention_backend": None}
    results = judge_backends(runs, [BASE, PYTORCH, TRITON], 64, own, starts={PYTORCH.name: [87.2]})
    by = {r.value: r for r in results}
    assert results[0].status == "baseline" and results[0].repetitions == 3
    assert by["pytorch"].status == "not chosen" and "slower than flashinfer" in by["pytorch"].reason
    assert by["pytorch"].ratio == pytest.approx(0.81, abs=0.01) and by["pytorch"].start_s == 87.2
    assert by["triton"].status == "chosen" and by["triton"].ratio_lo > 1
    lines = backend_reasons(results, own)
    assert lines[0].startswith("sampling_backend pytorch: 0.81x flashinfer (0.8") and lines[0].endswith(
        "kept flashinfer"
    )
    assert lines[1].startswith("attention_backend triton: 1.22x the engine's default") and lines[1].endswith(
        "chose triton"
    )
    assert "pytorch 87 s" in lines[2] and "compile" in lines[2]

    close = _runs({BASELINE: [1000, 1100, 900], TRITON.name: [1050, 1000, 1000]})
    (_, tri) = judge_backends(close, [BASE, TRITON], 64, own)
    assert tri.status == "not chosen" and "inside the noise" in tri.reason

    calm_lead = _runs({BASELINE: [1000, 1010, 990], TRITON.name: [1220, 1230, 1210]}, disturbed=True)
    (_, tri) = judge_backends(calm_lead, [BASE, TRITON], 64, own)
    assert tri.status == "not chosen" and "disturbed" in tri.reason


def test_the_winner_goes_to_stage_3_unless_the_params_set_it() -> None:
    sweep = BackendSweep(
        [BASE, TRITON, PYTORCH],
        _runs({BASELINE: [1000, 1010, 990], TRITON.name: [1220, 1230, 1210]}),
        {BASELINE: [9.0], TRITON.name: [11.0]},
        {PYTORCH.name: "sglang exited with code 1: no such sampler"},
        {},
        64,
    )
    decision = Decision(arm=Arm(0), engine_settings=EngineSettings(attention_backend="fa3"), reasons=["x"])
    own = {"attention_backend": None, "sampling_backend": None}
    taken = decide_backends(decision, sweep, own, explicit=())
    assert taken.engine_settings.attention_backend == "triton"
    assert taken.engine_settings.sampling_backend is None  # not measured: the params' own, unset
    failed = next(r for r in taken.backends if r.value == "pytorch")
    assert failed.status == "failed" and "no such sampler" in failed.reason and failed.ratio is None
    assert any("pytorch not measured (failed" in r for r in taken.reasons)
    again = Decision.from_json(json.loads(json.dumps(taken.to_json())))
    assert again.backends == taken.backends and again.engine_settings.attention_backend == "triton"

    kept = decide_backends(
        decision, sweep, {"attention_backend": "flashinfer"}, explicit={"attention_backend"}
    )
    won = next(r for r in kept.backends if r.value == "triton")
    assert won.status == "set in params" and "engine.attention_backend is set in the params" in won.reason
    assert kept.engine_settings.attention_backend == "fa3"  # left as the decision had it


def test_apply_settings_fills_the_sampling_backend_only_where_unset(write_params) -> None:
    params = load_params(write_params("apply", engine={"flavor": "sglang"}))
    settings = EngineSettings(max_running_requests_source="x", sampling_backend="pytorch")
    new, applied = apply_settings(params, Arm(0), settings)
    assert new.engine.sampling_backend == "pytorch" and applied["sampling_backend"] == "pytorch"
    mine = load_params(write_params("mine", engine={"flavor": "sglang", "sampling_backend": "flashinfer"}))
    assert apply_settings(mine, Arm(0), settings)[0].engine.sampling_backend == "flashinfer"
    old = Decision.from_json(json.loads(Path("tests/decisions/earlier_kit_mtp.json").read_text()))
    assert old.backends is None and apply_decision(params, old)[0].engine.sampling_backend is None


def test_each_flavor_spells_its_settings_and_refuses_what_it_cannot(write_params, tmp_path) -> None:
    p = load_params(write_params("spell", engine={"flavor": "transformers", "attention_backend": "eager"}))
    cmd = server_command(p, 8000)
    assert cmd[cmd.index("--attn-implementation") + 1] == "eager"
    s = load_params(write_params("sg", engine={"flavor": "sglang", "sampling_backend": "pytorch"}))
    cmd = server_command(s, 8000)
    assert cmd[cmd.index("--sampling-backend") + 1] == "pytorch"
    assert "--sampling-backend" not in server_command(load_params(write_params("plain")), 8000)

    with pytest.raises(ParamsError, match=r"decide.backends names sampling_backend, which transformers"):
        load_params(write_params("no", decide={"backends": {"sampling_backend": ["pytorch"]}}))
    with pytest.raises(ParamsError, match="vllm has no sampling backend"):
        load_params(write_params("nov", engine={"flavor": "vllm", "sampling_backend": "pytorch"}))
    with pytest.raises(ParamsError, match="non-empty list"):
        load_params(write_params("empty", decide={"backends": {"attention_backend": []}}))


def test_the_schedule_interleaves_at_the_top_level_and_skips_the_params_own_value(write_params) -> None:
    params = load_params(
        write_params(
            "alts",
            engine={"flavor": "sglang", "attention_backend": "flashinfer"},
            decide={
                "backends": {"attention_backend": ["triton", "flashinfer"], "sampling_backend": ["pytorch"]}
            },
        )
    )
    alts = alternatives(params, Arm(2, "MTP"))
    assert [a.name for a in alts] == [BASELINE, "attention_backend-triton", "sampling_backend-pytorch"]
    assert all(a.k == 2 and a.speculative for a in alts)
    order = [(s.round, s.arm.name, s.concurrency) for s in backend_slots(alts, 4, 2)]
    assert order == [
        (0, BASELINE, 4),
        (0, "attention_backend-triton", 4),
        (0, "sampling_backend-pytorch", 4),
        (1, "sampling_backend-pytorch", 4),
        (1, "attention_backend-triton", 4),
        (1, BASELINE, 4),
    ]
    assert RunParams.model_validate(params.model_dump()).decide.backends == params.decide.backends


@pytest.mark.slow
def test_kit_decide_measures_the_attention_implementation_of_transformers_serve(write_params) -> None:
    path = write_params(
        "backends",
        decide={
            "concurrencies": [1, 4],
            "repetitions": 2,
            "level_s": 0.5,
            "pilot_per_source": 0,
            "backends": {"attention_backend": ["eager"]},
        },
    )
    run = path.parent / "outputs" / "backends"
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "decide", str(path)], capture_output=True, text=True, timeout=420
    )
    assert done.returncode == 0, done.stderr[-3000:]
    decision = Decision.from_json(json.loads((run / "decision.json").read_text()))
    base, eager = decision.backends
    assert base.setting is None and base.status == "baseline" and base.concurrency == 4
    assert eager.setting == "attention_backend" and eager.value == "eager"
    for r in (base, eager):
        assert (
            r.repetitions == 2 and r.output_tok_s and r.output_tok_s_lo <= r.output_tok_s <= r.output_tok_s_hi
        )
        assert r.start_s and r.start_s > 0
    assert eager.ratio is not None and eager.ratio_lo <= eager.ratio <= eager.ratio_hi
    assert eager.status in ("chosen", "not chosen")
    line = next(r for r in decision.reasons if r.startswith("attention_backend eager: "))
    assert line.endswith("chose eager" if eager.status == "chosen" else "kept the engine's default")
    runs = pd.read_parquet(run / "sweep_backends.parquet")
    assert set(runs.arm) == {BASELINE, "attention_backend-eager"} and set(runs.concurrency) == {4}
    assert list(runs["round"]) == [0, 0, 1, 1] and list(runs.arm)[1:3] == ["attention_backend-eager"] * 2
    assert (run / "logs" / "server-sweep-attention_backend-eager.log").exists() or any(
        "attention_backend-eager" in p.name for p in (run / "logs").iterdir()
    )
    params, applied = apply_decision(load_params(path), decision)
    want = "eager" if eager.status == "chosen" else None
    assert params.engine.attention_backend == want and applied.get("attention_backend") == want
