"""Does speculation leave the answers as they were? The pilot's prompts answered several times by
plain decoding and by the speculative arm the decision picked, sampled as stage 3 samples them, and
compared.

Speculative decoding is meant to be lossless: at any temperature the engine's verify step accepts a
drafted token only as often as the model itself would have sampled it, so the answers are drawn from
the same distribution as plain decoding's. The sweep cannot see it when this fails: it measures
greedy (every arm answers a prompt alike), and greedy verification is exact even where the sampled
one is not. vLLM 0.32's CPU build is such a case: with n-gram speculation at temperature 0.7 (or 1.0)
the demo model's Hermes answers went from 72-77% tool calls to none, copying its prompt's tool-call
template, while greedy answers were identical, token for token (docs/decision.md). A sweep that
measured only speed would choose that arm: its drafts are accepted more often than they should be.

Each answer is described by what speculation's faults change: the share of its word 3-grams already
seen in its prompt or earlier in the answer (what accepted drafts copy), its length as a share of
its max_tokens, and why it ended (one share per finish reason). Under lossless speculation the
`SAMPLES` answers of each arm to one prompt are exchangeable, so the test shuffles the arms' labels
within each prompt (a stratified permutation test); each feature's p-value is read against the
largest standardised difference over all features per shuffle (max-T: the false-alarm rate holds for
the features together). The arm changed the answers when a feature's p-value is under `ALPHA` and
the feature moved by at least its `EFFECT`. docs/decision.md has what it found and what it costs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

from kit.asyncrun import run_coroutine
from kit.decide.measure.level import arm_client, stage3_sampling
from kit.decide.measure.pilot import Answer, SweepPrompt, pilot
from kit.decide.measure.servers import ArmServers
from kit.decide.measure.slots import SweepLog
from kit.decide.sweep.setup import SweepSetup
from kit.engines.settings import Arm

if TYPE_CHECKING:
    from kit.artifacts import Decision
    from kit.params import RunParams
    from kit.runfolder import RunFolder

ALPHA = 0.001
"""The false-alarm rate per arm checked: an arm whose answers are drawn as plain decoding's is set
aside this seldom."""
SAMPLES = 4
"""Answers per prompt and arm: one each gave 4 informative pairs of 19 on the demo, too few for any
permutation test to reach `ALPHA` (p = 0.25 for tool calls 4 -> 0)."""
PERMUTATIONS = 10_000
SEED = 20261207
EFFECT = {"repetition": 0.02, "length": 0.1, "finish": 0.1}
"""The smallest difference that counts: 2 points of repeated 3-grams, a tenth of the output budget,
a tenth of the answers ending otherwise. Below these a difference is not worth an arm."""
MIN_PROMPTS = 4
"""Fewer prompts answered by both arms than this test nothing."""


class ArmAnswersCheck(TypedDict):
    """decision.json's `answers_check[arm]`: how the arm's sampled answers compare with plain's."""

    prompts: int
    answers: list[int]
    """Answers compared: [plain's, the arm's]."""
    changed: bool
    p_value: float
    features: dict[str, list[float]]
    """Each feature's mean: [plain, the arm] (repetition, length, finish:<reason>)."""
    differs: list[str]
    """The features whose difference counted."""
    sentence: str


def prompt_text(prompt: dict[str, Any]) -> str:
    """What a drafter can copy from: the prompt's messages and its tools."""
    parts = [str(m.get("content") or "") for m in prompt.get("messages") or []]
    return " ".join([*parts, prompt.get("tools") or ""])


def repetition(text: str, context: str) -> float:
    """The share of the answer's word 3-grams already seen in `context` or earlier in the answer (0
    for an answer of fewer than three words)."""
    words, seen = text.split(), set()
    ctx = context.split()
    seen.update(tuple(ctx[i : i + 3]) for i in range(len(ctx) - 2))
    hits = total = 0
    for i in range(len(words) - 2):
        gram = tuple(words[i : i + 3])
        total += 1
        hits += gram in seen
        seen.add(gram)
    return hits / total if total else 0.0


def _features(answers: list[Answer], context: dict[str, str], ends: list[str]) -> np.ndarray:
    """One row per answer: repetition, length share, then one 0/1 column per finish reason in `ends`."""
    return np.array(
        [
            [
                repetition(a.get("text") or "", context[a["id"]]),
                (a["completion_tokens"] or 0) / max(1, a["max_tokens"]),
                *(float(str(a["finish_reason"]) == e) for e in ends),
            ]
            for a in answers
        ],
        dtype=float,
    ).reshape(len(answers), 2 + len(ends))


def permutation_test(
    groups: list[tuple[np.ndarray, np.ndarray]], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(the arm's mean less plain's per feature, each feature's p-value) over `groups`: per prompt,
    plain's feature rows and the arm's. The arms' labels are shuffled within each prompt; each
    feature's difference is standardised by its spread over the shuffles, and its p-value is the
    share of shuffles whose largest standardised difference, over all features, reaches it (max-T:
    the p-values hold for the features together)."""
    pooled = [np.vstack([a, b]) for a, b in groups]
    sizes = [(len(a), len(b)) for a, b in groups]
    n_plain, n_arm = sum(a for a, _ in sizes), sum(b for _, b in sizes)
    total = sum(x.sum(axis=0) for x in pooled)

    def diff(labels: list[np.ndarray]) -> np.ndarray:  # labels[g]: (draws, n_g), 1.0 = the arm's
        arm = sum(lab @ x for lab, x in zip(labels, pooled, strict=True))
        return arm / n_arm - (total - arm) / n_plain

    observed = diff([np.r_[np.zeros(a), np.ones(b)][None, :] for a, b in sizes])[0]
    labels = []
    for a, b in sizes:
        ranks = rng.random((PERMUTATIONS, a + b)).argsort(axis=1).argsort(axis=1)
        labels.append((ranks >= a).astype(float))  # b answers of the prompt the arm's, at random
    null = diff(labels)
    spread = null.std(axis=0)
    spread[spread == 0] = np.inf  # a feature no shuffle moves says nothing
    top = (np.abs(null) / spread).max(axis=1)
    z = np.abs(observed) / spread
    p = np.array([(1 + (top >= zf - 1e-12).sum()) / (PERMUTATIONS + 1) for zf in z])
    return observed, p


def compare(
    plain: list[Answer], arm: list[Answer], prompts: list[SweepPrompt], name: str
) -> ArmAnswersCheck | None:
    """Plain's answers against the arm's (each with its `text`), grouped by prompt id; `prompts` give
    what a drafter could copy. None when fewer than `MIN_PROMPTS` prompts have answers from both."""
    context = {p["id"]: prompt_text(p) for p in prompts}
    ids = [i for i in context if any(a["id"] == i for a in plain) and any(a["id"] == i for a in arm)]
    if len(ids) < MIN_PROMPTS:
        return None
    plain = [a for a in plain if a["id"] in ids]
    arm = [a for a in arm if a["id"] in ids]
    ends = sorted({str(a["finish_reason"]) for a in [*plain, *arm]})
    names = ["repetition", "length", *(f"finish:{e}" for e in ends)]
    groups = [
        (
            _features([a for a in plain if a["id"] == i], context, ends),
            _features([a for a in arm if a["id"] == i], context, ends),
        )
        for i in ids
    ]
    observed, p_each = permutation_test(groups, np.random.default_rng(SEED))
    p = float(p_each.min())
    mean_plain = np.vstack([g[0] for g in groups]).mean(axis=0)
    mean_arm = np.vstack([g[1] for g in groups]).mean(axis=0)
    differs = [
        n
        for n, d, pf in zip(names, observed, p_each, strict=True)
        if pf < ALPHA and abs(d) >= EFFECT[n.split(":")[0]]
    ]
    shown = [_said(n, a, b) for n, a, b in zip(names, mean_plain, mean_arm, strict=True)]
    counted = [s for n, s in zip(names, shown, strict=True) if n in differs]
    if differs:
        sentence = (
            f"{name} changed the answers, sampled as stage 3 samples ({len(ids)} pilot prompts, "
            f"{SAMPLES} answers each per arm: " + "; ".join(counted) + f"; p={p:.1g}): the engine's "
            "speculation does not sample as plain decoding does here, so it is not chosen (its speed is "
            "shown, not used; another engine version or backend may fix it)"
        )
    else:
        sentence = (
            f"{name}'s sampled answers match plain decoding's within chance ({len(ids)} pilot prompts, "
            f"{SAMPLES} answers each per arm, p={p:.2g}: " + "; ".join(shown[:2]) + ")"
        )
    return ArmAnswersCheck(
        prompts=len(ids),
        answers=[len(plain), len(arm)],
        changed=bool(differs),
        p_value=round(p, 6),
        features={
            n: [round(float(a), 4), round(float(b), 4)]
            for n, a, b in zip(names, mean_plain, mean_arm, strict=True)
        },
        differs=differs,
        sentence=sentence,
    )


def _said(feature: str, a: float, b: float) -> str:
    """A feature's means, plain's then the arm's, in words."""
    kind, _, end = feature.partition(":")
    if kind == "repetition":
        return f"repeated word 3-grams {a:.1%} -> {b:.1%}"
    if kind == "length":
        return f"length {a:.0%} -> {b:.0%} of max_tokens"
    return f"ended {end} {a:.0%} -> {b:.0%} of answers"


def arm_answers(
    params: RunParams,
    sweep_params: RunParams,
    folder: RunFolder,
    arm: Arm,
    prompts: list[SweepPrompt],
    hybrid: bool = False,
    running_caps: dict[int, int] | None = None,
    samples: int = SAMPLES,
) -> list[Answer] | None:
    """`prompts` answered `samples` times each on `arm`'s server (started for it as the sweep starts
    it, then stopped), sampled as stage 3 samples (kit.decide.measure.pilot). None when its server would not
    start."""
    warm = stage3_sampling(params)  # the sampler's first-use compile in the start, never in the answers
    servers = ArmServers(
        sweep_params,
        folder,
        [arm],
        hybrid,
        False,
        prompts,
        running_caps,
        warm_sampling=warm,
        log_name="check",
    )
    try:
        server = servers.get(arm)
        if server is None:
            return None

        async def go() -> list[Answer]:
            async with arm_client(servers.asks[arm.name], server) as client:
                return (await pilot(params, client, [p for p in prompts for _ in range(samples)]))[0]

        return run_coroutine(go())
    finally:
        servers.stop_all()


def check_answers(
    setup: SweepSetup, arm: Arm, plain: list[Answer] | None = None
) -> tuple[ArmAnswersCheck | None, list[Answer] | None]:
    """`arm`'s answers to the pilot's prompts against plain decoding's (`plain`, else answered now),
    `SAMPLES` each, compared (`compare`); and plain's answers, for the next arm. The check is None
    when a server would not start or too few answers came back."""
    params, sweep_params, folder, prompts = (
        setup.params,
        setup.server_params,
        setup.folder,
        setup.pilot_prompts,
    )
    hybrid, running_caps = setup.hybrid, setup.running_caps
    sweep_log = SweepLog(folder.logs / "sweep.log")
    sweep_log.line(f"answers check: {len(prompts)} pilot prompts x {SAMPLES}, plain and {arm.name}, sampled")
    if plain is None:
        plain = arm_answers(params, sweep_params, folder, Arm(0), prompts, hybrid, running_caps)
    answers = arm_answers(params, sweep_params, folder, arm, prompts, hybrid, running_caps) if plain else None
    check = compare(plain or [], answers or [], prompts, arm.name)
    sweep_log.line(f"answers check: {check['sentence'] if check else 'too few answers to compare'}")
    return check, plain


def answers_checked(
    setup: SweepSetup, sweep: pd.DataFrame, decision: Decision, redecide: Callable[[pd.DataFrame], Decision]
) -> tuple[pd.DataFrame, Decision]:
    """The decision once its speculative arm's sampled answers were checked against plain's: an arm
    that changed them is marked `answers_differ` in the sweep's table and the decision is made again
    without it (and the next speculative pick checked in turn). Nothing to check where stage 3 is
    greedy (the sweep's own answers are greedy: identical where verification is exact), where the
    check is off (`decide.answers_check`), or where there is no pilot sample (`decide.pilot_per_source`)."""
    params, folder = setup.params, setup.folder
    if (
        not params.decide.answers_check
        or not setup.pilot_prompts
        or params.generate.sampling.temperature == 0
    ):
        return sweep, decision
    arms = {a.name: a for a in setup.arms}
    checks: dict[str, ArmAnswersCheck] = {}
    plain: list[Answer] | None = None
    lines: list[str] = []
    while True:
        chosen = decision.arm
        arm = arms.get(chosen.name) if chosen is not None and chosen.speculative else None
        if arm is None or arm.name in checks:
            break
        check, plain = check_answers(setup, arm, plain)
        if check is None:
            lines.append(
                f"{arm.name}'s sampled answers could not be checked against plain decoding's (a server "
                "would not start, or too few answers came back: logs/sweep.log): chosen unchecked"
            )
            break
        checks[arm.name] = check
        if not check["changed"]:
            break
        sweep = set_aside(sweep, arm.name, check["sentence"])
        if folder.sweep.exists():  # the file keeps the rows the decision reads apart (an adaptive arm's)
            set_aside(pd.read_parquet(folder.sweep), arm.name, check["sentence"]).to_parquet(
                folder.sweep, index=False
            )
        decision = redecide(sweep)
    if not checks and not lines:
        return sweep, decision
    lines = [*(c["sentence"] for c in checks.values()), *lines]
    return sweep, replace(decision, answers_check=dict(checks) or None, reasons=[*decision.reasons, *lines])


def set_aside(sweep: pd.DataFrame, arm: str, why: str) -> pd.DataFrame:
    """The sweep's table with `arm`'s rows marked `answers_differ`, `why` their reason: measured,
    never chosen (kit.decide.choose.measured reads only `ok` rows)."""
    sweep = sweep.copy()
    sweep.loc[sweep.arm == arm, ["status", "reason"]] = ["answers_differ", why]
    return sweep
