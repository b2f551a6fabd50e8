"""The pilot: a few planned prompts of each source answered once by the plain arm's server after the
sweep, sampled as stage 3 samples them and with its output budget, so the job's output lengths are
measured, not assumed (the sweep's own answers are greedy and cut at `decide.max_tokens`); then,
while it has lasted under `MIN_PILOT_S`, further planned prompts (`more`), so that its speed can be
timed against the sweep's (kit.decide.forecast.job calibrates on it): on an H100, 48 prompts took 0.7 s
and stage 3 then ran 28% below the greedy, prefix-cached sweep's speed.

    answers, figures = await pilot(params, client, prompts, more)   # kit.decide.sweep.sweep awaits it

Before the timed pass, as many short sampled requests as it sends at once warm the engine's
sampler (the sweep is greedy; SGLang's FlashInfer sampler compiles on its first sampled batch, ~87
s on an H200): uncounted. Each answer: the prompt's id, source and prompt tokens, the tokens it
made, why it ended and the `max_tokens` it was given; `figures`: how many were sent, answered and
failed, the tokens made and the seconds it took at the sweep's top concurrency. Failed requests
are left out (a pilot is a sample: a missing answer loses a length, never the decision).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, NotRequired, TypedDict

from kit.engines.answers import ChatResult
from kit.engines.client import EngineClient
from kit.engines.flavors.base import RequestFields
from kit.engines.request_fields import run_request_fields, tool_request_fields
from kit.errors import EngineError
from kit.params import RunParams

ANSWER_COLUMNS = [
    "id",
    "source",
    "prompt_tokens",
    "completion_tokens",
    "finish_reason",
    "max_tokens",
    "pilot",
    "sent_s",
    "ended_s",
]
"""sweep_answers.parquet: one answer per prompt, the pilot's or the sweep's plain arm's (`pilot`)."""


class Answer(TypedDict):
    """One answer of the pilot or the sweep's levels: a row of sweep_answers.parquet (`ANSWER_COLUMNS`),
    read by kit.prompts.lengths and the forecast (kit.decide.forecast.inputs.pilot_lengths)."""

    id: str | None
    source: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None
    max_tokens: int
    pilot: bool
    """Whether the pilot gave it (sampled as stage 3 samples), else a sweep level (greedy)."""
    sent_s: NotRequired[float]
    ended_s: NotRequired[float]
    """The pilot's: when it was sent and answered, in seconds from the timed pass's start (the sweep's
    answers have none: empty in the file)."""
    text: NotRequired[str]
    """The pilot's: all the answer made, its reasoning, content and tool calls (`answer_text`), for
    kit.decide.checks.answers; not written to sweep_answers.parquet."""


class SweepPrompt(TypedDict):
    """A planned prompt as the sweep and the pilot send it (kit.decide.sweep.setup.sweep_prompts,
    pilot_prompts): a row of prompts.parquet (kit.prompts.plan.PROMPTS_SCHEMA) with its tools parsed
    for the engine's client (`tools_list`: kit.prompts.plan.tools_list, None without tools)."""

    id: str
    source: str
    source_row_id: str
    messages: list[dict[str, str]]
    tools: str | None
    metadata: str | None
    prompt_tokens: int | None
    tools_list: list[dict[str, Any]] | None


class PilotFigures(TypedDict, total=False):
    """How the pilot went: decision.json's `forecast.pilot`, read by kit.decide.forecast.job (its timing
    calibrates the sweep's ladder). A pilot not sent has `sent` 0 and `why`."""

    sent: int
    answered: int
    errors: int
    first_error: str | None
    output_tokens: int
    cut: int
    """Answers cut at their max_tokens."""
    concurrency: int
    queued: int
    """Prompts it had (the sample and `more`): `sent` below it, the time rule stopped it."""
    seconds: float
    """The timed pass (the warm-up's `warmup_s` aside)."""
    warmup_s: float
    why: str


def answer_of(prompt: SweepPrompt, r: ChatResult, max_tokens: int, *, pilot: bool = False) -> Answer:
    """The answer `r` to `prompt`, asked with `max_tokens`: a sweep level's (greedy), or the pilot's,
    which then adds when it was sent and answered and its text."""
    return Answer(
        id=prompt.get("id"),
        source=prompt.get("source"),
        prompt_tokens=prompt.get("prompt_tokens"),
        completion_tokens=r.completion_tokens,
        finish_reason=r.finish_reason,
        max_tokens=max_tokens,
        pilot=pilot,
    )


def answer_text(r: Any) -> str:
    """All an answer made: its reasoning, its content and its tool calls (kit.engines.answers.ChatResult)."""
    calls = json.dumps(r.tool_calls) if r.tool_calls else ""
    return " ".join(x for x in (r.reasoning or "", r.text or "", calls) if x)


WARMUP_TOKENS = 8
"""Tokens each warm-up request may make: enough to run the sampler, too few to cost time."""
MIN_PILOT_S = 5.0
"""A pilot that took less than this is not timed: its speed is a sub-second measurement (2.6x apart
over four runs of the same 24 requests on vLLM's CPU build), so the sweep's ladder stands
uncalibrated. The pilot keeps sending further planned prompts until it has lasted this long; one
that ran out of them first is not timed at all (kit.decide.forecast.job.timed)."""


async def pilot(
    params: RunParams,
    client: EngineClient,
    prompts: list[SweepPrompt],
    more: list[SweepPrompt] | None = None,
) -> tuple[list[Answer], PilotFigures]:
    """Answer `prompts` once each on `client`'s server, at most the sweep's top concurrency at once,
    then `more` in turn while the timed pass has lasted under `MIN_PILOT_S`."""
    sampling = params.generate.sampling
    caps = {src.name: src.max_tokens for src in params.data.sources if src.max_tokens}
    fields, tools = run_request_fields(params), tool_request_fields(params)
    queue = [*prompts, *(more or [])]
    concurrency = min(max(params.decide.concurrencies), len(queue)) or 1
    errors: list[str] = []

    async def one(i: int, p: SweepPrompt, cap: int | None = None) -> Answer | None:
        budget = cap or caps.get(p.get("source"), sampling.max_tokens)
        sent: RequestFields = {**fields, **(tools if p.get("tools_list") else {})}
        if sampling.seed is not None:
            sent["seed"] = sampling.seed + i
        sent_s = time.perf_counter() - t0
        try:
            r = await client.chat(p["messages"], tools=p.get("tools_list"), max_tokens=budget, fields=sent)
        except EngineError as e:
            errors.append(str(e)[:300])
            return None
        answer = answer_of(p, r, budget, pilot=True)
        answer["sent_s"] = round(sent_s, 3)
        answer["ended_s"] = round(time.perf_counter() - t0, 3)
        answer["text"] = answer_text(r)
        return answer

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, p, WARMUP_TOKENS) for i, p in enumerate(queue[:concurrency])))
    warmup_s = time.perf_counter() - t0
    errors.clear()  # a warm-up that failed is only a warm-up: the timed pass says what fails
    t0 = time.perf_counter()
    got: dict[int, Answer | None] = {}
    taken = iter(range(len(queue)))

    async def worker() -> None:  # a closed loop: each takes the next prompt as its answer comes
        for i in taken:
            if i >= len(prompts) and time.perf_counter() - t0 >= MIN_PILOT_S:
                return
            got[i] = await one(i, queue[i])

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    answers = [got[i] for i in sorted(got) if got[i] is not None]  # in the order sent
    figures = PilotFigures(
        sent=len(got),
        answered=len(answers),
        errors=len(errors),
        first_error=errors[0] if errors else None,
        output_tokens=sum(a["completion_tokens"] or 0 for a in answers),
        cut=sum(a["finish_reason"] == "length" for a in answers),
        concurrency=concurrency,
        queued=len(queue),
        seconds=round(seconds, 3),
        warmup_s=round(warmup_s, 3),
    )
    return answers, figures
