"""The kit's SGLang paths end to end against an SGLang-shaped stand-in server.

SGLang itself needs a GPU; tests/fake_sglang is a small FastAPI server behind the same module
name and launcher flags that serves /server_info, /metrics and speculative accounting. What is
under test is the kit: one server per sweep arm with that arm's flags, accept length carried
into sweep.parquet, the decision applied to stage 3, concurrency sized from /server_info, and
engine gauges in metrics.parquet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from kit import stages
from kit.decide.choose.decision import decision_arm
from kit.params import load_params
from kit.runfolder import RunFolder

pytestmark = pytest.mark.slow
FAKE = Path(__file__).resolve().parent / "fake_sglang"


def test_sweep_decision_and_generation_through_sglang_flags(write_params, tmp_path):
    argv_log = tmp_path / "argv.jsonl"
    params = load_params(
        write_params(
            "sg",
            counts={"metamathqa": 6, "codefeedback": 6},
            engine={
                "flavor": "sglang",
                "startup_timeout_s": 120,
                "speculative": {"algorithm": "NGRAM"},
                "env": {"PYTHONPATH": str(FAKE), "FAKE_SGLANG_LOG": str(argv_log)},
            },
            decide={
                "concurrencies": [1, 8],
                "spec_steps": [1, 2],
                "num_prompts": 4,
                "max_tokens": 32,
                "servers": "one_at_a_time",  # as on a GPU box: each arm's server in turn, every round
                "racing": False,  # every round measures every arm: the launches below are the schedule's
                "answers_check": False,  # the stand-in's answers are no model's; its launches are counted
            },
            generate={"concurrency": None, "sampling": {"max_tokens": 32, "seed": 0}},
        )
    )
    folder = RunFolder(params.run_dir)
    decision = stages.decide(params)
    answers = pd.read_parquet(folder.sweep_answers)  # one answer per prompt: the pilot's, else the sweep's
    assert len(answers) == answers.id.nunique() == 12  # the pilot (8 a source) took every planned prompt
    assert answers.pilot.all() and set(answers.source) == {"metamathqa", "codefeedback"}
    assert (answers.completion_tokens > 0).all() and set(answers.finish_reason) <= {"stop", "length"}
    assert decision.forecast is not None and decision.forecast.pilot["answered"] == 12

    launches = [" ".join(json.loads(x)) for x in argv_log.read_text().splitlines()]
    arms = [re.search(r"--speculative-num-draft-tokens (\d)", a) for a in launches]
    # three interleaved rounds, the arms' order reversed every other round (a server already up is
    # kept), then plain once more for the drift check; a round the sweep judged disturbed (a busy
    # 2-core machine) is measured again before that check
    seq = [int(m[1]) - 1 if m else 0 for m in arms]
    redone = int(pd.read_parquet(folder.sweep).repetitions.max()) - 3
    if redone:
        assert seq[:7] == [0, 1, 2, 1, 0, 1, 2] and seq[-1] == 0 and len(seq) > 8, seq
    else:
        assert seq == [0, 1, 2, 1, 0, 1, 2, 0]
    plain, k1, k2 = launches[:3]
    assert "--speculative-algorithm" not in plain and "--max-running-requests 8" in plain
    assert "--speculative-algorithm NGRAM --speculative-num-draft-tokens 3" in k2
    assert "--speculative-ngram-max-bfs-breadth 1" in k2 and "--max-running-requests 8" in k1
    assert "--cuda-graph-max-bs-decode 8" in k1, "renamed for the launcher, from its --help"
    sweep = pd.read_parquet(folder.sweep)
    # every level three times; a repetition the sweep set aside as disturbed (a loaded machine) and
    # measured again counts once, so a level keeps at least three unless the redo was disturbed too
    assert set(sweep.status) == {"ok"} and ((sweep.repetitions + sweep.set_aside) >= 3).all(), sweep
    assert (sweep.output_tok_s_lo <= sweep.output_tok_s).all() and (
        sweep.output_tok_s <= sweep.output_tok_s_hi
    ).all()
    runs = pd.read_parquet(folder.sweep_runs)
    assert list(runs.phase.iloc[[0, -1]]) == ["start", "end"] and len(runs) >= 2 + 3 * 2 * 3
    assert decision["noise"]["repetitions"] >= 3 and decision["noise"]["servers_together"] is False
    spec = sweep[sweep.spec_k > 0]
    assert spec.accept_length.between(1.5, 3.0).all() and sweep[sweep.spec_k == 0].accept_length.isna().all()
    assert decision["decided_by"] == "measured" and decision["speculation_available"] is True
    arm = decision_arm(decision)
    assert arm.name in {"plain", "spec_k1", "spec_k2"}
    assert any("n-gram k=" in r for r in decision["reasons"]) and not any(
        "MTP" in r for r in decision["reasons"]
    )

    manifest = stages.generate(params)

    applied = manifest["settings_from_decision"]
    assert applied["chosen_arm"] == arm.name
    gen_argv = " ".join(json.loads(argv_log.read_text().splitlines()[-1]))
    k = arm.k
    assert ("--speculative-num-draft-tokens" in gen_argv) == (k > 0)
    running = decision["engine_settings"]["max_running_requests"]
    if k:  # SGLang under speculation: explicit, from memory (unset it would be 48), not the sweep's 8
        assert running > 8 and f"--max-running-requests {running}" in gen_argv
    else:  # plain: the engine's own capacity, never the sweep's top level
        assert running is None and "--max-running-requests" not in gen_argv
    assert manifest["engine_capacity"] == (running or 256), "read from the server's /server_info"
    assert "server_info" in manifest["capacity_source"]
    assert manifest["concurrency"] == min(2 * manifest["engine_capacity"], 12)  # the queue never drains
    assert manifest["complete"] and manifest["rows"] + manifest["failures"] == 12
    metrics = pd.read_parquet(folder.metrics)
    assert {"num_running_reqs", "gen_throughput"} <= set(metrics.columns)
