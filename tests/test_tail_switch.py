"""Speculation for the tail: which arm the decision allows and up to how many requests, and the
switch itself in a running job (replicas restarted with the speculative arm, requests cut by the
restart sent again, every row made once, the rows after the switch labelled with their engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kit import stages
from kit.artifacts import Decision
from kit.decide.choose.tailarm import tail_arm
from kit.decide.costmodel import MODEL_ERROR
from kit.generate.tailswitch import tail_plan
from kit.params import SpeculativeParams, load_params
from kit.runfolder import RunFolder

FAKE = Path(__file__).resolve().parent / "fake_sglang"


def _level(k: int, c: int, predicted: float, lo: float | None = None, hi: float | None = None) -> dict:
    row = {
        "arm": "plain" if k == 0 else f"spec_k{k}",
        "spec_k": k,
        "concurrency": c,
        "predicted_tok_s": predicted,
    }
    if lo is not None:
        row.update(measured_tok_s=(lo + hi) / 2, measured_lo=lo, measured_hi=hi)
    return row


def _decision(table: list[dict], **extra) -> Decision:
    """decision.json of an earlier kit (the arm spelled among the engine settings), as read."""
    return Decision.from_json(
        {
            "chosen_arm": "plain",
            "speculation_available": True,
            "engine_settings": {"speculative": False, "spec_k": 0},
            "table": table,
            **extra,
        }
    )


def test_a_measured_win_outside_the_noise_sets_the_crossover() -> None:
    table = [
        _level(0, 1, 100, 90, 110),
        _level(2, 1, 180, 150, 200),  # apart: a win
        _level(0, 8, 700, 650, 750),
        _level(2, 8, 900, 760, 950),  # apart (760 > 750): a win
        _level(0, 32, 2000, 1900, 2100),
        _level(2, 32, 2050, 1950, 2150),  # overlapping: no win, whatever is predicted
        _level(3, 1, 200),  # k=3 only predicted: x2.0 at 1, more than the model's error
        _level(3, 8, 1000),
        _level(3, 32, 2000 * (1 + MODEL_ERROR) * 0.99),  # inside the error: no win
    ]
    arm, why = tail_arm(_decision(table))
    assert arm is not None and (arm.k, arm.crossover, arm.evidence) == (3, 8, "predicted")
    assert arm.ratio == 2.0 and "k=3" in why
    only_measured = [r for r in table if r["spec_k"] != 3]
    arm, _ = tail_arm(_decision(only_measured))
    assert (arm.k, arm.crossover, arm.evidence) == (2, 8, "measured")
    answers_differ = [{**r, "status": "answers_differ"} if r["spec_k"] == 2 else r for r in only_measured]
    arm, why = tail_arm(_decision(answers_differ))  # its sampled answers were not plain's: never run
    assert arm is None and "no concurrency where speculation wins" in why


def test_no_win_outside_the_noise_no_tail_arm() -> None:
    inside = [_level(0, 1, 100, 90, 110), _level(2, 1, 120, 105, 130)]  # overlapping intervals
    arm, why = tail_arm(_decision(inside))
    assert arm is None and "no concurrency where speculation wins outside its noise" in why
    assert tail_arm(None) == (None, "no decision.json: run stage 2 (kit decide) first")
    arm, why = tail_arm(_decision([], speculation_available=False, speculation_unavailable_reason="no MTP"))
    assert arm is None and "no MTP" in why


def test_tail_plan_says_why_it_is_off(write_params) -> None:
    decision = _decision([_level(0, 1, 100, 90, 110), _level(2, 1, 180, 150, 200)])
    base = SpeculativeParams(algorithm="NGRAM")
    off = load_params(write_params())
    assert tail_plan(off, decision, base) == (
        None,
        {"enabled": False, "why": "generate.tail_speculation is off"},
    )
    on = load_params(write_params(generate={"tail_speculation": True}))
    assert "transformers serve has no speculative decoding" in tail_plan(on, decision, base)[1]["why"]
    sg = load_params(write_params(engine={"flavor": "sglang"}, generate={"tail_speculation": True}))
    plan, note = tail_plan(sg, decision, base)
    assert plan is not None and note["enabled"] and note["k"] == 2 and note["crossover"] == 1
    spec = plan.params.engine.speculative
    assert (spec.algorithm, spec.num_steps, spec.num_draft_tokens) == ("NGRAM", 2, 3)
    assert sg.engine.speculative.algorithm is None  # the run's own params untouched


@pytest.mark.slow
def test_the_tail_switches_to_speculation_and_every_row_is_made_once(write_params, tmp_path: Path) -> None:
    """An SGLang-shaped server (tests/fake_sglang: a decode step per token, fewer with speculation)
    runs 16 prompts at 4 in flight; the decision says k=2 wins at 8 requests or fewer, so once 8 are
    left the server restarts with k=2. Requests it had out are sent again; no id is lost or doubled."""
    argv_log = tmp_path / "argv.jsonl"
    params = load_params(
        write_params(
            "tail",
            counts={"metamathqa": 8, "webinstructsub": 8},
            engine={
                "flavor": "sglang",
                "startup_timeout_s": 120,
                "speculative": {"algorithm": "NGRAM"},
                "env": {
                    "PYTHONPATH": str(FAKE),
                    "FAKE_SGLANG_LOG": str(argv_log),
                    "FAKE_SGLANG_STEP_S": "0.05",
                },
            },
            generate={
                "concurrency": 4,
                "tail_speculation": True,
                "tail_drain_s": 0.5,
                "order": "plan",
                "sampling": {"max_tokens": 48, "seed": 0},
            },
        )
    )
    folder = RunFolder(params.run_dir).ensure()
    table = [_level(0, 1, 30, 28, 32), _level(2, 1, 60, 55, 65), _level(0, 8, 200, 190, 210)]
    table += [_level(2, 8, 300, 280, 320), _level(0, 64, 900, 850, 950), _level(2, 64, 800, 760, 840)]
    folder.write_decision(_decision(table))
    manifest = stages.generate(params)

    note = manifest["tail_speculation"]
    assert note["enabled"] and note["k"] == 2 and note["crossover"] == 8, note
    assert note["switched"] and note["replicas_switched"] == ["server-0"] and note["left_at_switch"] <= 8
    assert manifest["complete"] and manifest["rows"] == 16 and manifest["server_restarts"] == 0
    launches = [json.loads(x) for x in argv_log.read_text().splitlines()]
    assert len(launches) == 2 and "--speculative-algorithm" not in launches[0]
    assert launches[1][launches[1].index("--speculative-num-draft-tokens") + 1] == "3"
    rows = pq.read_table(folder.generations, columns=["id", "engine"]).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}) == 16
    engines = [json.loads(r["engine"])["speculative"] for r in rows]
    assert engines.count(None) >= 16 - 8 and any(e and e["num_steps"] == 2 for e in engines)
