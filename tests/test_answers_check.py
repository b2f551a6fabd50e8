"""The answers check's statistics (kit.decide.checks.answers): answers drawn alike are not flagged,
answers a lossy speculation changed are, and the sentence says what moved. The check on the real
vLLM (its CPU build's n-gram arm changes sampled answers) is in tests/test_vllm_engine.py."""

from __future__ import annotations

import numpy as np

from kit.decide.checks.answers import ALPHA, SAMPLES, compare, repetition
from kit.decide.measure.pilot import Answer, SweepPrompt

PROMPTS = 20
TEMPLATE = '<tool_call> {"name": <function-name>, "arguments": <args-json-object>} </tool_call>'


def prompts() -> list[SweepPrompt]:
    return [
        SweepPrompt(
            id=f"p{i}",
            source="hermes_fc" if i % 4 == 0 else "other",
            source_row_id=str(i),
            messages=[{"role": "user", "content": f"question {i}: " + (TEMPLATE if i % 4 == 0 else "")}],
            tools=None,
            metadata=None,
            prompt_tokens=30,
            tools_list=None,
        )
        for i in range(PROMPTS)
    ]


def answers(rng: np.random.Generator, lossy: bool = False) -> list[Answer]:
    """`SAMPLES` answers per prompt: on a tool prompt a tool call 3 times in 4 (never when `lossy`: it
    stops after copying the template), else words of its own, some cut at max_tokens."""
    out = []
    for i in range(PROMPTS):
        for _ in range(SAMPLES):
            words = " ".join(f"w{int(x)}" for x in rng.integers(0, 400, size=rng.integers(10, 40)))
            end = "length" if rng.random() < 0.4 else "stop"
            if i % 4 == 0:
                called = not lossy and rng.random() < 0.75
                end = "tool_calls" if called else "stop"
                words = words if not lossy else f"{TEMPLATE} {words}"
            out.append(
                Answer(
                    id=f"p{i}",
                    source=None,
                    prompt_tokens=30,
                    completion_tokens=int(rng.integers(20, 64)),
                    finish_reason=end,
                    max_tokens=64,
                    pilot=True,
                    text=words,
                )
            )
    return out


def test_repetition_counts_three_word_runs_seen_before() -> None:
    assert repetition("a b c d", "x y z") == 0.0
    assert repetition("a b c a b c", "") == 0.25  # of four 3-grams, the last repeats the first
    assert repetition("x y z w", "x y z") == 0.5  # "x y z" is the prompt's
    assert repetition("two words", "two words and more") == 0.0


def test_answers_drawn_alike_are_not_flagged() -> None:
    """Forty pairs of answer sets drawn from the same distribution: none flagged, and the p-values
    spread as chance spreads them (not all near 0, not all 1)."""
    checks = [
        compare(
            answers(np.random.default_rng(2 * s)), answers(np.random.default_rng(2 * s + 1)), prompts(), "a"
        )
        for s in range(40)
    ]
    assert all(c is not None and not c["changed"] for c in checks), [
        c["sentence"] for c in checks if c["changed"]
    ]
    p = sorted(c["p_value"] for c in checks)
    assert p[0] > ALPHA and 0.1 < p[len(p) // 2] < 0.9, p


def test_answers_a_lossy_arm_changed_are_flagged_with_what_moved() -> None:
    check = compare(
        answers(np.random.default_rng(0)), answers(np.random.default_rng(1), lossy=True), prompts(), "spec_k1"
    )
    assert check is not None and check["changed"] and check["p_value"] < ALPHA, check
    assert "finish:tool_calls" in check["differs"] and "repetition" in check["differs"], check
    assert check["features"]["finish:tool_calls"][1] == 0.0
    assert (
        check["sentence"].startswith("spec_k1 changed the answers")
        and "ended tool_calls" in check["sentence"]
    )


def test_too_few_prompts_answered_by_both_test_nothing() -> None:
    plain = answers(np.random.default_rng(0))
    assert compare(plain, [a for a in plain if a["id"] in ("p1", "p2")], prompts(), "spec_k1") is None
