"""The engine's own adaptive speculation as a sweep arm (`decide.adaptive_k`, kit.decide.measure.adaptive):
its name, how each flavor spells it, the errors for what an engine cannot run, and the comparison
with plain decoding and the kit's pick per level, on a sweep's measurements with known figures
(summarised by the sweep's own code, paired by round as the decision pairs its leads)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from kit.artifacts import Decision
from kit.columns import ADAPTIVE, OUTPUT_TOK_S, SPEC_K
from kit.decide.choose.apply import apply_decision
from kit.decide.measure.adaptive import check_adaptive, compare, split, with_adaptive
from kit.decide.measure.journal import sweep_key
from kit.decide.measure.tables import RUN_COLUMNS, mark, summarise
from kit.decide.views.notebook import adaptive_table
from kit.display import Answer
from kit.engines.arms import Arm, adaptive_ceiling, arm_k
from kit.engines.flavors import server_command
from kit.engines.settings import arm_engine, sweep_arms
from kit.errors import ParamsError
from kit.index_page import _with_adaptive
from kit.params import RunParams


def params(adaptive_k: int | None = 3, **engine: object) -> RunParams:
    return RunParams.model_validate(
        {
            "run": "t",
            "model": {"path": "/m"},
            "engine": engine,
            "decide": {"concurrencies": [1, 64], "spec_steps": [1, 3], "adaptive_k": adaptive_k},
        }
    )


def test_the_adaptive_arm_is_named_apart_from_the_fixed_arm_of_its_ceiling() -> None:
    arms = sweep_arms(params(flavor="vllm", speculative={"algorithm": "NGRAM"}))
    assert [a.name for a in arms] == ["plain", "spec_k1", "spec_k3", "adaptive_k3"]
    assert arms[-1] == Arm(3, "NGRAM", adaptive=True) and arms[-1] != arms[2]
    assert arm_k("adaptive_k3") is None and adaptive_ceiling("adaptive_k3") == 3
    assert adaptive_ceiling("spec_k3") is None
    assert [a.name for a in sweep_arms(params(None, flavor="vllm"))] == ["plain", "spec_k1", "spec_k3"]
    p = params(flavor="vllm", speculative={"algorithm": "NGRAM"})
    names = [a.name for a in arms]
    assert sweep_key(p, [], names, True, {}) != sweep_key(p, [], names[:-1], True, {})


def test_the_params_own_adaptive_switch_leaves_the_sweeps_key_as_it_was() -> None:
    """Each arm spells its own speculation: the params' `engine.speculative.adaptive` measures nothing
    differently, so an earlier kit's journal of the same sweep is still resumed."""
    on = params(None, flavor="vllm", speculative={"algorithm": "NGRAM", "adaptive": True})
    off = params(None, flavor="vllm", speculative={"algorithm": "NGRAM"})
    assert sweep_key(on, [], ["plain"], True, {}) == sweep_key(off, [], ["plain"], True, {})
    assert "adaptive" not in json.dumps(
        off.engine.model_dump(mode="json", exclude={"speculative": {"adaptive"}})
    )


def test_vllm_gets_sglangs_bands_as_a_schedule_capped_at_the_ceiling() -> None:
    p = params(flavor="vllm", speculative={"algorithm": "NGRAM"})
    eng = arm_engine(p, Arm(3, "NGRAM", adaptive=True), hybrid=False)
    cmd = server_command(p.model_copy(update={"engine": eng}), 8000)
    config = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert config["num_speculative_tokens"] == 3
    assert config["num_speculative_tokens_per_batch_size"] == [
        [1, 7, 3],
        [8, 31, 3],
        [32, 63, 1],
        [64, 64, 0],
    ]
    two = arm_engine(p, Arm(2, "NGRAM", adaptive=True), hybrid=False).model_copy(
        update={"max_running_requests": 256}
    )
    cmd = server_command(p.model_copy(update={"engine": two}), 8000)
    config = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [
        [1, 7, 2],
        [8, 31, 2],
        [32, 63, 1],
        [64, 256, 0],
    ]
    fixed = arm_engine(p, Arm(3, "NGRAM"), hybrid=False)
    cmd = server_command(p.model_copy(update={"engine": fixed}), 8000)
    assert "per_batch_size" not in cmd[cmd.index("--speculative-config") + 1]


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ({"flavor": "transformers"}, "transformers serve has no adaptive speculation"),
        ({"flavor": "sglang", "speculative": {"algorithm": "NGRAM"}}, "EAGLE or EAGLE3 (MTP too), not NGRAM"),
        (
            {
                "flavor": "sglang",
                "speculative": {"algorithm": "MTP"},
                "extra_args": ["--enable-dp-attention"],
            },
            "DP attention",
        ),
        ({"flavor": "vllm", "dp_size": 2, "speculative": {"algorithm": "NGRAM"}}, "data parallelism"),
    ],
)
def test_an_adaptive_arm_the_engine_cannot_run_is_refused_before_measuring(engine: dict, said: str) -> None:
    with pytest.raises(ParamsError) as e:
        check_adaptive(params(3, **engine))
    assert str(e.value).startswith("decide.adaptive_k 3: ") and said in str(e.value)
    assert "remove decide.adaptive_k" in str(e.value)


def test_what_the_engines_run_passes_and_the_ceiling_is_bounded() -> None:
    for engine in (
        {"flavor": "sglang", "speculative": {"algorithm": "MTP"}},
        {"flavor": "sglang", "speculative": {"algorithm": "EAGLE3", "draft_model_path": "/d"}},
        {"flavor": "vllm", "speculative": {"algorithm": "NGRAM"}},
    ):
        check_adaptive(params(3, **engine))
    check_adaptive(params(None, flavor="transformers"))  # not asked: nothing to refuse
    with pytest.raises(ValidationError, match="adaptive_k"):
        params(8, flavor="vllm")


# ---- the comparison, on measurements with known figures ------------------------------------------
def runs_of(figures: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    """sweep_runs.parquet's rows: one measurement per round of each (arm, level)."""
    rows = []
    for (arm, c), values in figures.items():
        k = adaptive_ceiling(arm) or arm_k(arm) or 0
        for r, v in enumerate(values):
            rows.append(
                {"round": r, "phase": "sweep", "arm": arm, "algorithm": "NGRAM" if k else None, SPEC_K: k,
                 "concurrency": c, OUTPUT_TOK_S: v, "status": "ok", "disturbed": False, "errors": 0}
            )  # fmt: skip
    return pd.DataFrame(rows).reindex(columns=RUN_COLUMNS)


FIGURES = {
    ("plain", 1): [100.0, 110.0, 90.0],
    ("spec_k1", 1): [200.0, 220.0, 180.0],
    ("adaptive_k3", 1): [210.0, 231.0, 189.0],  # 1.05x spec_k1, 2.1x plain, every round
    ("plain", 16): [1000.0, 1100.0, 900.0],
    ("spec_k1", 16): [500.0, 550.0, 450.0],
    ("adaptive_k3", 16): [800.0, 880.0, 720.0],  # 0.8x plain (the kit's pick there), every round
}


def frames(figures: dict) -> tuple:
    runs = mark(runs_of(figures))
    return split(mark(summarise(runs)), runs)


def test_the_comparison_pairs_rounds_against_plain_and_the_kits_pick() -> None:
    core, runs, adaptive = frames(FIGURES)
    assert adaptive is not None and ADAPTIVE not in core and ADAPTIVE not in runs
    assert set(core.arm) == {"plain", "spec_k1"} and set(runs.arm) == {"plain", "spec_k1"}
    cmp = compare(adaptive, core, runs, "vLLM", "n-gram")
    assert (cmp.arm, cmp.ceiling, cmp.label) == ("adaptive_k3", 3, "vLLM's adaptive n-gram (up to k=3)")
    low, high = cmp.levels
    assert (low.concurrency, low.kit_arm, low.kit_tok_s, low.plain_tok_s) == (1, "spec_k1", 200.0, 100.0)
    assert low.vs_kit == pytest.approx(1.05) and low.vs_plain == pytest.approx(2.1)
    assert low.vs_kit_rounds == 3 and low.vs_kit_lo == pytest.approx(1.05)
    assert (high.kit_arm, high.kit_label) == ("plain", "plain decoding")
    assert high.vs_kit == pytest.approx(0.8) and high.vs_plain == pytest.approx(0.8)
    assert high.kit_leads and not low.kit_leads, "0.8x outside ±14% pooled noise; 1.05x is not"
    assert cmp.matches_kit is False and cmp.cost_at == 16 and cmp.cost_pct == pytest.approx(20.0)
    assert cmp.sentence == (
        "vLLM's adaptive n-gram (up to k=3): 0.80x (0.80-0.80) of the kit's pick (plain decoding) at 16, "
        "2.10x (2.10-2.10) plain at 1; it does not already get what the kit decides: the kit's pick leads "
        "it outside the noise at 16; cost 20% at 16 (0.80x (0.80-0.80) of plain decoding)"
    )
    decision = with_adaptive(Decision(reasons=["r"]), adaptive, core, runs, "vLLM", "n-gram")
    assert decision.adaptive == cmp and decision.reasons == ["r", cmp.sentence] and decision.crashes == []
    died = {"round": 3, "phase": "sweep", "arm": "adaptive_k3", SPEC_K: 3, "concurrency": 16,
            "status": "crashed", "crash_error": "RuntimeError: x", "crash_in_flight": 9,
            "restarted": True}  # fmt: skip
    with_death = replace(adaptive, runs=pd.concat([adaptive.runs, pd.DataFrame([died])]))
    dead = with_adaptive(Decision(), with_death, core, runs, "vLLM", "n-gram").crashes
    assert [(c.arm, c.concurrency, c.error, c.restarted) for c in dead] == [
        ("adaptive_k3", 16, "RuntimeError: x", True)
    ]
    shown = adaptive_table(decision)
    assert (shown.title, shown.note, len(shown.frame)) == (cmp.label, cmp.sentence, 2)
    assert shown.frame["the pick leads outside the noise"].tolist() == ["no", "yes"]
    answer = _with_adaptive(Answer("Decision", "plain decoding", "measured."), decision)
    assert answer.detail == f"measured. The engine's own switch: {cmp.sentence}."


def test_a_switch_within_the_noise_gets_what_the_kit_decides() -> None:
    figures = {**FIGURES, ("adaptive_k3", 16): [990.0, 1111.0, 880.0]}  # 0.99x, 1.01x, 0.98x of plain
    core, runs, adaptive = frames(figures)
    cmp = compare(adaptive, core, runs, "SGLang", "MTP")
    assert cmp.matches_kit is True and not any(lv.kit_leads for lv in cmp.levels)
    assert cmp.levels[1].vs_kit == pytest.approx(0.99) and cmp.cost_pct == pytest.approx(1.0)
    assert "it already gets what the kit decides" in cmp.sentence and "cost 1% at 16" in cmp.sentence


def test_an_adaptive_arm_that_never_ran_is_said_and_a_sweep_without_one_changes_nothing() -> None:
    runs = runs_of({k: v for k, v in FIGURES.items() if k[0] != "adaptive_k3"})
    table = summarise(runs)
    assert mark(table) is table and mark(runs) is runs, "no adaptive arm: no new column"
    core, core_runs, adaptive = split(table, runs)
    assert core is table and core_runs is runs and adaptive is None
    decision = Decision(reasons=["r"])
    assert with_adaptive(decision, None, core, runs, "vLLM", "n-gram") is decision
    assert "adaptive" not in decision.to_json()
    crashed = pd.concat(
        [
            table,
            pd.DataFrame(
                [
                    {
                        "arm": "adaptive_k3",
                        SPEC_K: 3,
                        "concurrency": 1,
                        "status": "crashed",
                        "reason": "its server kept dying: RuntimeError: x",
                    }
                ]
            ),
        ]  # fmt: skip
    )
    core, _, adaptive = split(mark(crashed), runs)
    out = with_adaptive(decision, adaptive, core, runs, "SGLang", "MTP")
    assert out.adaptive is not None and out.adaptive.status == "crashed" and out.adaptive.levels == []
    assert out.reasons[-1] == (
        "SGLang's adaptive MTP (up to k=3) could not be measured (crashed): "
        "its server kept dying: RuntimeError: x"
    )
    again = Decision.from_json(json.loads(json.dumps(out.to_json())))
    assert again.adaptive == out.adaptive


# ---- on the real engine ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cpu_vllm_measures_its_schedule_beside_the_arms(tmp_path: Path, demo_model: Path) -> None:
    """`kit decide` on vLLM's CPU build (params/demo-vllm.yaml, shrunk to two levels and one round):
    the adaptive arm's server gets the schedule (its argv, and vLLM's own echo of the arguments it
    took), its rows are marked in the sweep's tables and kept out of the decision's own table and
    choice, and decision.json carries the comparison with its figures."""
    from test_vllm_engine import demo_vllm, kit

    from kit.decide.views.notebook import decision_tables
    from kit.index_page import run_answers
    from kit.runfolder import RunFolder

    decide = {"concurrencies": [1, 8], "spec_steps": [1], "adaptive_k": 2, "repetitions": 1, "level_s": 1}
    params = demo_vllm(tmp_path, demo_model, "adaptive", decide={**decide, "pilot_per_source": 0})
    done = kit("decide", str(params))
    assert done.returncode == 0, done.stderr[-4000:]
    run = tmp_path / "outputs" / "adaptive"
    sweep = pd.read_parquet(run / "sweep.parquet")
    assert set(sweep.arm) == {"plain", "spec_k1", "adaptive_k2"} and set(sweep.status) == {"ok"}, sweep
    assert sweep[ADAPTIVE].tolist() == (sweep.arm == "adaptive_k2").tolist()
    assert (sweep[sweep[ADAPTIVE]][SPEC_K] == 2).all()
    runs = pd.read_parquet(run / "sweep_runs.parquet")
    assert set(runs[runs[ADAPTIVE]].concurrency) == {1, 8}
    log = (run / "logs" / "sweep-adaptive_k2.log").read_text()
    schedule = '"num_speculative_tokens_per_batch_size": [[1, 7, 2], [8, 31, 2], [32, 63, 1], [64, 64, 0]]'
    assert schedule in log.splitlines()[0], "the kit's argv"
    assert "'num_speculative_tokens_per_batch_size': [[1, 7, 2], [8, 31, 2], [32, 63, 1], [64, 64, 0]]" in log
    decision = json.loads((run / "decision.json").read_text())
    assert {row["arm"] for row in decision["table"]} <= {"plain", "spec_k1"}
    assert set(decision["measured"]) == {"plain", "spec_k1"} and decision["decided_by"] == "measured"
    adaptive = decision["adaptive"]
    assert (adaptive["arm"], adaptive["ceiling"], adaptive["status"]) == ("adaptive_k2", 2, "ok")
    assert [lv["concurrency"] for lv in adaptive["levels"]] == [1, 8]
    for lv in adaptive["levels"]:
        assert lv["output_tok_s"] > 0 and lv["plain_tok_s"] > 0 and lv["kit_arm"] in ("plain", "spec_k1")
        for key in ("vs_plain", "vs_kit"):  # paired by round: a disturbed level is measured once more
            assert lv[f"{key}_lo"] <= lv[key] <= lv[f"{key}_hi"] and lv[f"{key}_rounds"] >= 1, lv
    assert isinstance(adaptive["matches_kit"], bool) and adaptive["cost_at"] in (1, 8)
    assert adaptive["sentence"].startswith("vLLM's adaptive n-gram (up to k=2): ")
    assert adaptive["sentence"] in decision["reasons"]
    folder = RunFolder(run)  # notebook 02 and the index page show it
    shown = [t for t in decision_tables(folder) if t.title == adaptive["label"]]
    assert len(shown) == 1 and len(shown[0].frame) == 2
    measured = [t for t in decision_tables(folder) if t.title == "Measured sweep"][0].frame
    assert "n-gram adaptive (up to k=2)" in set(measured.arm)
    assert any(adaptive["sentence"] in a.detail for a in run_answers(folder))


def test_stage_3_refuses_params_asking_for_the_engines_switch_under_a_decisions_arm() -> None:
    """The decision's arm spells stage 3's speculation and would clear `adaptive`: said, not dropped."""
    own = params(None, flavor="vllm", speculative={"algorithm": "NGRAM", "num_steps": 3, "adaptive": True})
    decision = Decision(arm=Arm(0), decided_by="measured")
    with pytest.raises(ParamsError, match="generate.use_decision: false"):
        apply_decision(own, decision)
    new, applied = apply_decision(params(None, flavor="vllm", speculative={"algorithm": "NGRAM"}), decision)
    assert applied["chosen_arm"] == "plain" and not new.engine.speculative.algorithm
