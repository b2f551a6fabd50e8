"""The saturating async generation loop.

A fixed number of worker coroutines (the concurrency) pull work items from one lazy iterator,
so the engine's queue stays full while the kit's memory stays flat however many prompts are
planned. Each real completion goes to the shard writer; a rejected request goes to the failure
log; a transient fault or an answer that is no completion (`completions.py`) is retried with
backoff; a server that exits or hangs is restarted by the pool's watchdog, and the requests it
cut are retried without counting an attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from kit.artifacts.manifest_sections import PremiseReport, RayReport
from kit.display import hours
from kit.engines.answers import ChatResult
from kit.engines.client import RequestRejected, TransientEngineError
from kit.engines.flavors.base import ToolFields
from kit.errors import EngineError
from kit.generate.completions import not_a_completion
from kit.generate.eta import TokenEta
from kit.generate.metrics import Timeline
from kit.generate.pool import ServerPool
from kit.generate.premises import PremiseCheck
from kit.generate.rowsampling import RowSampling
from kit.generate.rowsampling import identity as row_identity
from kit.generate.rowsampling import sampling_identity as sampling_identity
from kit.generate.store import FailureLog, ShardWriter, now_utc, shard_rows_for
from kit.generate.tailswitch import TailSwitch
from kit.generate.timeline_sample import TimelineSample
from kit.generate.work_item import FailureReason, GeneratedRow, SamplingColumns, WorkItem
from kit.params import GenerateParams
from kit.progress import progress

log = logging.getLogger(__name__)
REJECTION_STORM = 16
"""Rejections in a row, with no request accepted yet, that stop the run: the engine refuses what the
kit sends (a field, a tool choice, a prompt format) and every other request would fail the same."""
UNWIND_S = 10.0
"""Seconds the cancelled workers get to unwind at the end (their rows are already on disk)."""
MAX_IN_FLIGHT = 16384
"""Requests in flight at most, however large the engines' capacity."""
STARVED_TICKS = 2
"""Timeline samples in a row with nothing waiting in the engine before the loop sends more."""
ADMITTED = 0.5
"""Share of the kit's requests out that the engine must be running for "none waiting" to mean the
kit is its limit: below it, the requests have not reached its scheduler (a first-use compile held
an H100's SGLang at 0 running and 0 waiting for 70 s; read as starved, the kit went from 1,024 to
16,384 in flight, and a 16,000-deep queue then kept SGLang at 10-512 running of its 512)."""


class WorkSource(Protocol):
    """Work items handed out as they come (a Ray actor's blocks): `take` waits for the next one,
    None when there will be no more. A plain iterator is the other kind of source."""

    async def take(self) -> WorkItem | None: ...


@dataclass
class LoopStats:
    rows: int = 0
    failures: int = 0
    output_tokens: int = 0
    retries: int = 0
    in_flight: int = 0
    restarts: int = 0
    concurrency: int = 0
    """Requests in flight at most (workers), at the end of the run."""
    concurrency_start: int = 0
    """... at its start (it grows when the engine's gauges show the kit is the limit)."""
    capacity: Any = None
    """The engines' `Capacity` (requests they run at once, and where that figure came from)."""
    premises: PremiseReport | None = None
    """The decision's premises checked against the run (kit.generate.premises), for the manifest."""
    ray: RayReport | None = None
    """A Ray job's blocks and actors (kit.generate.raydriver), for the manifest."""
    started: float = field(default_factory=time.monotonic)


@dataclass
class GenerationLoop:
    pool: ServerPool
    writer: ShardWriter
    failures: FailureLog
    timeline: Timeline
    params: GenerateParams
    engine_json: str
    sampling_json: str
    sampling_hash: str
    context_limit: int | None = None
    """The model's context length; longer prompts are failures, not requests."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Request fields for this engine (`kit.engines.request_fields.run_request_fields`); the seed is
    set per sample."""
    tool_fields: ToolFields = field(default_factory=ToolFields)
    """Fields added to requests that offer tools (`kit.engines.request_fields.tool_request_fields`)."""
    max_tokens_by_source: dict[str, int] = field(default_factory=dict)
    """Output budgets of the sources that set their own (`data.sources[].max_tokens`)."""
    row_sampling: RowSampling | None = None
    """Fields of rows with sampling of their own (a batch line's body: `item["sampling"]`)."""
    grow_when_starved: bool = True
    """Send more at once when the engine idles for want of requests (False: `generate.concurrency`
    was set, and is kept; the loop then only says, once, that the engine could take more)."""
    tail: TailSwitch | None = None
    """Speculation for the tail (`generate.tail_speculation`), checked at each answer and each tick."""
    premises: PremiseCheck | None = None
    """The decision re-checked live against the timeline's samples (warned once each, in the manifest)."""
    eta: TokenEta | None = None
    """Time left in output tokens (kit.generate.eta): in the bar and the timeline."""
    answered: Callable[[WorkItem], None] | None = None
    """Called with each work item once it is answered (its row added to the writer, or its
    failure logged); not for items cut by the end of the run."""
    show_progress: bool = True
    """A progress bar of its own (False: a Ray actor's loop, whose driver shows the job's)."""
    engine_last: dict[str, float] = field(default_factory=dict)
    """The engine's gauges and counters at the last sample (a Ray driver sums its actors')."""
    stats: LoopStats = field(default_factory=LoopStats)
    rejected_before_any_row: int = 0
    total: int = 0
    _workers: list[asyncio.Task] = field(default_factory=list)
    _starved_ticks: int = 0
    _said_starved: bool = False
    _taken: int = 0
    """Work items taken from the iterator so far."""

    async def run(self, items: Iterator[WorkItem] | WorkSource, total: int, concurrency: int) -> LoopStats:
        self.total = total
        bar = progress(
            total=total, desc="generate", unit="row", smoothing=0.1, disable=not self.show_progress
        )
        self._items, self._bar = items, bar
        # a first sample before any request: the engine's counters (accept length) count from here
        self._sample(await self._engine_metrics())
        ticker = asyncio.create_task(self._tick(bar))
        watchdog = asyncio.create_task(self.pool.watch())
        self._spawn(concurrency)
        work = asyncio.create_task(self._all_workers())
        try:
            with fewer_gc_passes():
                done, _ = await asyncio.wait({work, watchdog}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a worker's or the watchdog's error (a server that cannot come back)
        finally:  # also on Ctrl-C, SIGTERM (cancellation) and on a server that cannot be restarted
            if self.tail is not None:
                await self.tail.stop()
            tasks = [ticker, watchdog, work, *self._workers]
            for task in tasks:
                task.cancel()  # cancelled at their next step: none adds a row after this
            # first of all: every finished row reaches disk (this waits for the shards in flight)
            self.writer.flush(self.failures.flush)
            bar.close()
            await asyncio.wait(tasks, timeout=UNWIND_S)
            for task in (work, *self._workers):
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: asyncio would log it again at exit
            self._sample(await self._engine_metrics(), closing=True)
            self.timeline.close()
        return self.stats

    def _sample(self, engine: dict[str, float], closing: bool = False) -> TimelineSample:
        self.engine_last = engine
        return self.timeline.sample(self.stats, engine, closing, self.eta)

    def _check_premises(self, sample: TimelineSample) -> None:
        """The decision's premises against this sample; not once the tail switch has begun (replicas
        draining, restarting or on another arm are not the decided engine)."""
        if self.premises is None or (self.tail is not None and self.tail.started_at_s is not None):
            return
        down = sum(not r.ready.is_set() for r in self.pool.replicas)
        for warning in self.premises.observe(sample, down, self.pool.restarts):
            log.warning(warning)

    def _maybe_switch(self) -> None:
        """Start the tail's switch to speculation once it is due (kit.generate.tailswitch)."""
        if self.tail is not None and self.tail.due(self.left(), len(self.pool.replicas)):
            self.tail.start(self.pool, self.left(), self.left)

    def left(self) -> int:
        """Requests not finished yet: not sent, or in flight."""
        return self.total - self._taken + self.stats.in_flight

    def _shard_due(self) -> bool:
        rows = shard_rows_for(self.params.shard_rows, self.total)
        return self.writer.due(rows, self.params.shard_seconds, self.params.shard_mb * 2**20)

    def _spawn(self, n: int) -> None:
        """Start `n` more workers on the shared work iterator (the loop's concurrency grows by `n`)."""
        self._workers += [asyncio.create_task(self._worker(self._items, self._bar)) for _ in range(n)]
        self.stats.concurrency += n
        self.stats.concurrency_start = self.stats.concurrency_start or self.stats.concurrency

    async def _all_workers(self) -> None:
        """Until every worker is done, workers started meanwhile included; a worker's error is raised."""
        while pending := [t for t in self._workers if not t.done()]:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()

    def _keep_engine_full(self, sample: TimelineSample) -> None:
        """More requests in flight when the engine's gauges show the kit is its limit.

        Every worker waits on a request, the engine runs them (at least `ADMITTED` of them) and has
        none waiting: whatever it runs, a slot that frees (or a whole wave of them: requests of one
        length finish together) waits for the kit's next request, a round trip away. After
        `STARVED_TICKS` such samples in a row the loop doubles its workers (at most `MAX_IN_FLIGHT`).
        A sample taken between two waves (few running, none waiting, answers coming back since the
        last sample) neither counts nor breaks the row; one with few running and no answers (the
        requests have not reached the scheduler) breaks it. Engines without gauges (transformers
        serve) keep the concurrency given.
        """
        running, waiting = sample.num_running_reqs, sample.num_queue_reqs
        # not the tail: every worker has a request, and there are more to send
        busy = self.stats.in_flight >= self.stats.concurrency and self._taken < self.total
        idle = waiting is not None and busy and waiting < 1
        admitted = running is not None and running >= ADMITTED * self.stats.in_flight
        between_waves = idle and running is not None and not admitted and (sample.tok_s or 0) > 0
        if not between_waves:
            self._starved_ticks = self._starved_ticks + 1 if idle and admitted else 0
        if self._starved_ticks < STARVED_TICKS or self.stats.concurrency >= MAX_IN_FLIGHT:
            return
        if not self.grow_when_starved:
            if not self._said_starved:
                log.warning(
                    "generate.concurrency (%d) keeps the engine below its capacity: it has no request "
                    "waiting, so slots wait for the kit. Unset it to let the kit fill the engine.",
                    self.stats.concurrency,
                )
            self._said_starved = True
            return
        more = min(self.stats.concurrency, MAX_IN_FLIGHT - self.stats.concurrency)
        log.warning(
            "the engine had no request waiting (%d running) with %d in flight: the kit was its limit; "
            "sending up to %d at once from now on",
            int(running or 0),
            self.stats.in_flight,
            self.stats.concurrency + more,
        )
        self._starved_ticks = 0
        self._spawn(more)

    async def _worker(self, items: Iterator[WorkItem] | WorkSource, bar: Any) -> None:
        while (item := await _take(items)) is not None:
            self._taken += 1
            self.stats.in_flight += 1
            try:
                row = await self._generate(item)
            finally:
                self.stats.in_flight -= 1
            if row is not None:
                self.writer.add(row)
                self.stats.rows += 1
                self.stats.output_tokens += row["completion_tokens"] or 0
            bar.update(1)
            if self.eta is not None:
                self.eta.answered(item, (row["completion_tokens"] or 0) if row is not None else None)
            if self.answered is not None:
                self.answered(item)
            self._maybe_switch()  # at each answer, not each tick: a slow /metrics scrape delays ticks
            if self._shard_due():
                await self._flush()

    async def _generate(self, item: WorkItem) -> GeneratedRow | None:
        if self.context_limit and (item.get("prompt_tokens") or 0) >= self.context_limit:
            # Some servers (transformers serve) accept such prompts and produce garbage; SGLang
            # rejects them. Either way the row is a failure: say so without sending it.
            reason = f"prompt of {item['prompt_tokens']} tokens exceeds the context of {self.context_limit}"
            self._fail(item, "context_overflow", reason, 0, permanent=True)
            return None
        attempt = 0
        reason: FailureReason
        while True:
            replica = await self.pool.acquire()
            generation = replica.generation
            replica.outstanding += 1
            try:
                result = await self._send(replica.client, item)
            except RequestRejected as e:
                self._rejected(item, e, attempt + 1)
                return None
            except TransientEngineError as e:
                if await self.pool.recover(replica, generation, e):
                    continue  # the server exited, hung or restarted: not the request's fault, not counted
                reason, error = "transient", str(e)
            else:
                error = not_a_completion(result)
                self.pool.note_answer(replica, generation, good=error is None)
                if error is None:
                    return self._row(item, result, replica.engine_json or self.engine_json)
                reason = "bad_answer"  # HTTP 200 but not a completion: retried, never stored
            finally:
                replica.outstanding -= 1
            attempt += 1
            self.stats.retries += 1
            if attempt > self.params.retries:
                self._fail(item, reason, error, attempt, permanent=False)
                return None
            await asyncio.sleep(min(30.0, 0.5 * 2**attempt) * (0.5 + random.random()))

    async def _send(self, client: Any, item: WorkItem) -> ChatResult:
        s, fields = self.params.sampling, self.fields
        max_tokens = self.max_tokens_by_source.get(item["source"], s.max_tokens)
        own = item.get("sampling")
        if own is not None and self.row_sampling is not None:  # the line's own settings over the run's
            fields, s = self.row_sampling.resolve(own)
            max_tokens = s.max_tokens if "max_tokens" in own else max_tokens
        if s.seed is not None:
            fields = {**fields, "seed": s.seed + item["sample_index"]}
        if item["tools_list"] and self.tool_fields:
            fields = {**fields, **self.tool_fields}
        return await client.chat(
            item["messages"], tools=item["tools_list"], max_tokens=max_tokens, fields=fields
        )

    def _row(self, item: WorkItem, r: ChatResult, engine_json: str) -> GeneratedRow:
        return {
            "id": item["id"],
            "prompt_id": item["prompt_id"],
            "sample_index": item["sample_index"],
            "source": item["source"],
            "messages": item["messages"],
            "tools": item["tools"],
            "completion": r.text,
            "reasoning": r.reasoning,
            "tool_calls": orjson.dumps(r.tool_calls).decode() if r.tool_calls else None,
            "reasoning_tokens": r.reasoning_tokens,
            "finish_reason": r.finish_reason,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "latency_s": r.latency_s,
            "ttft_s": r.ttft_s,
            "accept_length": r.accept_length,
            "engine": engine_json,
            **self._sampling_of(item),
            "finished_at": now_utc(),
        }

    def _sampling_of(self, item: WorkItem) -> SamplingColumns:
        """The row's `sampling` and `sampling_hash`: the run's, or the merged settings of a row with its
        own (and its source's max_tokens where the row set none, as sent)."""
        own = item.get("sampling")
        if own is None or self.row_sampling is None:
            return {"sampling": self.sampling_json, "sampling_hash": self.sampling_hash}
        _, s = self.row_sampling.resolve(own)
        if "max_tokens" not in own and item["source"] in self.max_tokens_by_source:
            s = s.model_copy(update={"max_tokens": self.max_tokens_by_source[item["source"]]})
        text, digest = row_identity(s)
        return {"sampling": text, "sampling_hash": digest}

    def _rejected(self, item: WorkItem, e: RequestRejected, attempts: int) -> None:
        """A 4xx answer: permanent once the engine has accepted a request of this session; before
        that, a run of them means the engine refuses what the kit sends, and the run stops."""
        if self.stats.rows:
            self._fail(item, "rejected", str(e), attempts, permanent=True)
            return
        self._fail(item, "rejected", str(e), attempts, permanent=False)  # retried by the next run
        self.rejected_before_any_row += 1
        if self.rejected_before_any_row >= min(REJECTION_STORM, max(self.total, 1)):
            raise EngineError(
                f"the engine rejected the first {self.rejected_before_any_row} requests and accepted "
                f"none, so the run stopped instead of failing every row. The engine said: {e}\n"
                "What to do: fix what it names (a sampling field, a parser, the model's limits) and "
                "rerun the same command; the rejected prompts are retried, nothing was lost."
            )

    def _fail(
        self, item: WorkItem, reason: FailureReason, error: str, attempts: int, permanent: bool
    ) -> None:
        self.stats.failures += 1
        self.failures.append(
            {
                "id": item["id"],
                "prompt_id": item["prompt_id"],
                "sample_index": item["sample_index"],
                "source": item["source"],
                "reason": reason,
                "error": error[:2000],
                "attempts": attempts,
                "permanent": permanent,
            }
        )

    async def _flush(self) -> None:
        """Queue a shard (and the timeline and failure log after it) in the writer thread."""
        await self.writer.flush_async(self.timeline.save, self.failures.flush)

    async def _engine_metrics(self) -> dict[str, float]:
        """The engine's own gauges and counters (/metrics of SGLang and vLLM), summed over replicas;
        empty where not served."""
        merged: dict[str, float] = {}
        for r in self.pool.replicas:
            if r.client is None or not r.ready.is_set():
                continue  # restarting
            try:
                m = await asyncio.wait_for(r.client.prometheus(), timeout=2.0)
            except Exception:  # metrics are best effort: never let them stop generation
                m = None
            r.note_counters(m)  # tokens flowing: the server lives (the watchdog reads this)
            for k, v in (m or {}).items():
                merged[k] = merged.get(k, 0.0) + float(v)
        return merged

    async def _tick(self, bar: Any) -> None:
        while True:
            await asyncio.sleep(self.timeline.interval_s)
            last = self._sample(await self._engine_metrics())
            self._keep_engine_full(last)
            self._check_premises(last)
            self._maybe_switch()
            postfix = {"tok_s": f"{last.tok_s or 0:.0f}", "fail": self.stats.failures}
            if last.eta_s is not None:
                postfix["eta"] = hours(last.eta_s)
            bar.set_postfix(**postfix, refresh=False)
            if self._shard_due():
                await self._flush()


async def _take(items: Iterator[WorkItem] | WorkSource) -> WorkItem | None:
    """The next work item of either kind of source; None when it has no more."""
    if isinstance(items, Iterator):
        return next(items, None)
    return await items.take()


@contextlib.contextmanager
def fewer_gc_passes(young: int = 50_000) -> Iterator[None]:
    """Collect the young generation every `young` allocations instead of 700 while the loop runs.

    Nearly every object a request makes is freed by reference counting; at the default threshold
    the cyclic collector still ran dozens of times a second at 2,000 req/s, for ~15% of the loop's
    CPU (docs/lab/bench_client.md). The old thresholds come back afterwards (a notebook's kernel).
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], young), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
