"""Stage 3 on Ray (`generate.executor: ray`): engine replicas as Ray actors, the kit's rows, once.

The driver (the `kit generate` process, holding the run's lock) joins a Ray cluster (or starts a
local instance), starts one `EngineActor` per replica on the resources it asks Ray for, cuts the
pending items into blocks (`kit.generate.blocks`) and hands each actor a block and one ahead. It
polls every actor each second: blocks done (their shards on disk), counters for the one progress
bar, engine gauges for the job's timeline (`metrics.parquet`, summed over actors, as on one
machine) and the decision's live premises. An actor that dies (its process killed, its node
lost) has its unfinished blocks taken back, less the rows its shards already hold, and handed to
the actors left; a new actor is started in its place (at most `generate.ray.max_actor_restarts`).
An error inside an actor (a server that cannot start) stops the job with that error, as on one
machine. Ray is imported here only: `pip install kit[ray]`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.artifacts.manifest_sections import ActorInfo, ActorOptions, ActorReport, RayReport
from kit.engines.capacity import Capacity
from kit.engines.flavors import flavor
from kit.errors import EngineError, ParamsError
from kit.generate.blocks import Block, BlockBook, block_rows, cut_blocks, positions_done
from kit.generate.loop import LoopStats
from kit.generate.metrics import Timeline
from kit.generate.premises import PremiseCheck
from kit.generate.rayactor import ActorPoll, EngineActor
from kit.generate.session import Session
from kit.generate.store import row_id
from kit.generate.work import select_rows
from kit.params import RunParams
from kit.progress import progress
from kit.runfolder import RunFolder, ShardFiles

log = logging.getLogger(__name__)
POLL_S = 1.0
SILENT_S = 300.0
"""An actor that leaves a poll unanswered this long is taken as hung: killed, its blocks handed on.
(A late answer is only waited for: on a loaded machine an answer can take seconds.)"""
AHEAD = 2
"""Blocks an actor holds at once while blocks wait: the one its loop works on and the next."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ParamsError(
            "generate.executor is ray but Ray is not installed in this environment: "
            "pip install 'kit[ray]' (or set generate.executor: local)"
        ) from None
    return ray


def connect(ray: Any, params: RunParams) -> str:
    """Join the cluster named by generate.ray.address or RAY_ADDRESS, else start a local one."""
    address = params.generate.ray.address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return address or "local"
    kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
    no_token = getattr(getattr(ray, "exceptions", None), "AuthenticationError", ())  # Ray >= 2.5x
    try:
        ray.init(address=address, **kwargs) if address else ray.init(**kwargs)
    except ConnectionError as e:
        cause = str(e.__cause__ or e).splitlines()[0][:400]
        raise EngineError(
            f"could not join the Ray cluster at {address} ({cause}). Check the address (`ray status` "
            f"on the head node prints it). {RAY_TOKEN_STEP}"
        ) from None
    except no_token as e:
        cause = str(e).split(".")[0][:200]
        raise EngineError(
            f"could not join the Ray cluster at {address or 'this machine'} ({cause}). {RAY_TOKEN_STEP}"
        ) from None
    return address or "local"


RAY_TOKEN_STEP = (
    "A cluster with token authentication (`ray start` turns it on when its node has a token, as "
    "after `ray get-auth-token --generate`, or under RAY_AUTH_MODE=token) takes a driver that has "
    "the same token: copy it from the head node (`ray get-auth-token` there prints it) into "
    "~/.ray/auth_token here, or into a file named by RAY_AUTH_TOKEN_PATH, or into RAY_AUTH_TOKEN, "
    "and set RAY_AUTH_MODE=token (docs/scaling.md)."
)
"""What a driver needs to join a cluster that checks tokens (Ray 2.60's rules)."""


def actor_resources(params: RunParams, cluster: dict[str, float]) -> tuple[int, ActorOptions]:
    """(actors, Ray options of one actor): GPUs per replica where the cluster has GPUs and the
    engine uses them, CPUs per actor from generate.ray.cpus_per_actor."""
    eng, ray_p = params.engine, params.generate.ray
    per_gpus = eng.gpus_per_replica or eng.tp_size
    gpus = int(cluster.get("GPU", 0))
    uses_gpus = gpus > 0 and flavor(eng.flavor).started  # a server the kit starts takes the GPUs
    options = ActorOptions(num_cpus=ray_p.cpus_per_actor)
    if uses_gpus:
        options["num_gpus"] = per_gpus
    actors = ray_p.actors or (gpus // per_gpus if uses_gpus else eng.replicas)
    if actors < 1:
        raise ParamsError(
            f"the Ray cluster has {gpus} GPU(s), fewer than one replica needs ({per_gpus}): "
            "add GPU nodes, or lower engine.tp_size / engine.gpus_per_replica"
        )
    return actors, options


@dataclass
class ActorState:
    index: int
    handle: Any
    started: Any
    """The `start` call's reference (its answer: where the actor runs, its capacity)."""
    info: ActorInfo = field(default_factory=ActorInfo)
    asked: Any = None
    """The poll it has not answered yet, and since when (monotonic seconds)."""
    asked_at: float = 0.0
    last: ActorPoll = field(default_factory=ActorPoll)
    """Its latest poll (or finish) answer."""
    blocks_done: int = 0
    found_work: bool | None = None
    """Whether blocks were waiting when it was first ready for them (None: never ready): an actor
    whose server came up after the others had taken every block is closed without one."""
    closed: bool = False
    finished: bool = False
    died: str | None = None


@dataclass
class RayJob:
    """The driver's side of one Ray session of stage 3."""

    session: Session
    todo: pa.Table
    work: list[tuple[int, int]]
    """(row of `todo`, sample index) of every item left, in the order to send them."""
    actors: dict[int, ActorState] = field(default_factory=dict)
    restarts_left: int = 0

    @property
    def params(self) -> RunParams:
        return self.session.params

    @property
    def folder(self) -> RunFolder:
        return self.session.folder

    def run(self) -> LoopStats:
        ray = import_ray()
        address = connect(ray, self.params)
        n, options = actor_resources(self.params, ray.cluster_resources())
        # Ray starts workers at niceness 15 (RAY_worker_niceness): the actor's loop and the server it
        # starts would lose CPU to anything else on the node (docs/lab/bench_ray.md: 19% per row)
        niceness = {"env_vars": {"RAY_worker_niceness": "0"}}
        self._remote = ray.remote(EngineActor).options(max_restarts=0, runtime_env=niceness, **options)
        self.restarts_left = self.params.generate.ray.max_actor_restarts
        for i in range(n):
            self._start_actor(i)
        guess = self.params.generate.concurrency or 64
        size = block_rows(len(self.work), n, guess, self.params.generate.ray.block_rows)
        book = BlockBook(cut_blocks(self.work, size))
        log.info(
            "Ray (%s): %d actors %s, %d blocks of up to %d items", address, n, options, len(book.blocks), size
        )
        stats = LoopStats()
        timeline: Timeline | None = None  # its clock starts with the first engine up, as on one machine
        premises: PremiseCheck | None = None
        bar = progress(total=len(self.work), desc="generate", unit="row", smoothing=0.1)
        try:
            while not book.finished:
                tick = time.monotonic()
                self._poll(ray, book)
                self._hand_out(book)
                self._sum(stats)
                if timeline is None and any(a.info for a in self.actors.values()):
                    timeline = Timeline(
                        self.session.files.metrics, self.session.files.metrics_log, interval_s=POLL_S
                    )
                if premises is None and all(a.info for a in self.live()):
                    premises = self._premises(n)
                if timeline is not None:
                    last = timeline.sample(stats, self._engine_sum())
                    for warning in premises.observe(last, servers_restarting=0) if premises else ():
                        log.warning(warning)
                    bar.set_postfix(tok_s=f"{last.tok_s:.0f}", actors=len(self.live()), refresh=False)
                bar.n = book.items_done() + sum(a.last.answered_open for a in self.live())
                bar.refresh()
                time.sleep(max(0.0, POLL_S - (time.monotonic() - tick)))
            self._finish_all(ray)
            self._sum(stats)
        finally:
            bar.close()
            if timeline is not None:
                timeline.sample(stats, self._engine_sum(), closing=True)
                timeline.close()
            for a in self.actors.values():
                ray.kill(a.handle, no_restart=True)
        stats.capacity = self._capacity()
        stats.restarts = sum(a.last.restarts for a in self.actors.values())
        stats.premises = premises.report() if premises is not None else None
        report: RayReport = {
            "address": address,
            "actor_options": options,
            **book.summary(),
            "actors": self._report(),
        }
        stats.ray = report
        return stats

    def live(self) -> list[ActorState]:
        return [a for a in self.actors.values() if a.died is None and not a.finished]

    def _start_actor(self, index: int) -> None:
        handle = self._remote.remote(
            self.params.model_dump_json(), str(self.folder.root), index, self.session.made_with
        )
        self.actors[index] = ActorState(index, handle, handle.start.remote(len(self.work)))

    def _poll(self, ray: Any, book: BlockBook) -> None:
        """Every actor's news: started ones are asked at once and their answers waited for together
        (for up to POLL_S: the loop's pace), never one after the other."""
        now = time.monotonic()
        for a in self.live():
            if a.info and a.asked is None:
                a.asked, a.asked_at = a.handle.poll.remote(), now
        waiting = [a.started for a in self.live() if not a.info]
        waiting += [a.asked for a in self.live() if a.asked is not None]
        ready = set(ray.wait(waiting, num_returns=len(waiting), timeout=POLL_S)[0]) if waiting else set()
        for a in self.live():
            if not a.info and a.started in ready:
                self._answer(ray, a, book, a.started, "info")
            elif a.asked is not None and a.asked in ready:
                ref, a.asked = a.asked, None
                if self._answer(ray, a, book, ref, "last"):
                    for index in a.last.done:
                        book.done(index)
                        a.blocks_done += 1
            elif a.asked is not None and now - a.asked_at > SILENT_S:
                ray.kill(a.handle, no_restart=True)  # a shard it still lands repeats ids: set aside on resume
                self._lost(a, book, TimeoutError(f"no answer for {SILENT_S:.0f} s; killed as hung"))

    def _answer(self, ray: Any, a: ActorState, book: BlockBook, ref: Any, into: str) -> bool:
        """Store an actor's (ready) answer in `a.<into>`; an actor that died is lost (False), an
        error raised inside it stops the job with that error."""
        try:
            setattr(a, into, ray.get(ref))
            return True
        except ray.exceptions.RayActorError as e:
            self._lost(a, book, e)
            return False
        except ray.exceptions.RayTaskError as e:
            raise e.as_instanceof_cause() from None

    def _lost(self, a: ActorState, book: BlockBook, error: Exception) -> None:
        """An actor died: its blocks go back (less what its shards hold), another starts in its place."""
        a.died = str(error).splitlines()[0][:300]
        back = book.take_back(a.index, lambda b: self._on_disk(b, a.index))
        log.warning(
            "Ray actor %d died (%s): %d block(s) handed to the other actors", a.index, a.died, len(back)
        )
        if self.restarts_left > 0 and not book.finished:
            self.restarts_left -= 1
            self._start_actor(max(self.actors) + 1)
        elif not self.live():
            raise EngineError(
                f"every Ray actor died and generate.ray.max_actor_restarts "
                f"({self.params.generate.ray.max_actor_restarts}) were used; the last said: {a.died}. "
                "The rows on disk are kept: rerun the same command to go on."
            )

    def _on_disk(self, block: Block, actor: int) -> set[int]:
        """Positions of `block.items` whose rows the actor's shards of this block hold."""
        files = ShardFiles(self.folder.generations)
        mine = [p for p in files.parts() if files.seq_of(p, block.tag(actor))]  # its shards of this block
        done: set[str] = set()
        for path in mine:
            try:
                done |= set(pq.read_table(path, columns=["id"]).column("id").to_pylist())
            except (pa.ArrowException, OSError):
                continue  # the final check sets it aside; its rows are then generated again
        pids = pc.take(self.todo.column("id"), pa.array([r for r, _ in block.items], pa.int64()))
        rids = [row_id(p, k) for p, (_, k) in zip(pids.to_pylist(), block.items, strict=True)]
        return positions_done(rids, done)

    def _hand_out(self, book: BlockBook) -> None:
        for a in self.live():
            if not a.info or a.closed:
                continue
            held = len(book.held_by(a.index))
            if a.found_work is None:
                a.found_work = bool(book.waiting)
            ahead = AHEAD if len(book.waiting) >= len(self.live()) else 1
            while held < ahead and (block := book.hand(a.index)) is not None:
                prompts, items = select_rows(self.todo, block.items)
                a.handle.give.remote(block.index, prompts, items)
                held += 1
            if held == 0 and not book.waiting:
                a.handle.close.remote()
                a.closed = True

    def _finish_all(self, ray: Any) -> None:
        for a in self.live():
            if not a.info:  # still starting (in place of a dead one) when the work ran out
                a.finished = True
            elif not a.closed:
                a.handle.close.remote()
        ending = [(a, a.handle.finish.remote()) for a in self.live()]  # every actor stops at once
        for a, ref in ending:
            try:
                a.last = ray.get(ref, timeout=SILENT_S)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
                a.died = str(e).splitlines()[0][:300] or "no answer"  # its blocks were done: nothing is lost
            a.finished = True

    def _sum(self, stats: LoopStats) -> None:
        every = self.actors.values()
        stats.rows = sum(a.last.rows for a in every)
        stats.failures = sum(a.last.failures for a in every)
        stats.output_tokens = sum(a.last.output_tokens for a in every)
        stats.in_flight = sum(a.last.in_flight for a in self.live())
        stats.concurrency = sum(a.last.concurrency for a in self.live()) or stats.concurrency
        stats.concurrency_start = stats.concurrency_start or stats.concurrency

    def _engine_sum(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for a in self.live():
            for k, v in a.last.engine.items():
                merged[k] = merged.get(k, 0.0) + float(v)
        return merged

    def _capacity(self) -> Capacity:
        caps = [a.info.get("engine_capacity") for a in self.actors.values() if a.info]
        sources = {a.info.get("capacity_source") for a in self.actors.values() if a.info}
        total = sum(caps) if caps and all(c is not None for c in caps) else None
        return Capacity(total, " / ".join(sorted(s for s in sources if s)) or "unknown")

    def _premises(self, n: int) -> PremiseCheck:
        eng = self.params.engine.model_copy(update={"replicas": n})
        return PremiseCheck.for_run(
            self.session.decision,
            self.params.model_copy(update={"engine": eng}),
            self._capacity(),
            len(self.work),
        )

    def _report(self) -> list[ActorReport]:
        return [
            {
                **a.info,
                "actor": a.index,
                "blocks_done": a.blocks_done,
                "found_work": a.found_work,
                "rows": a.last.rows,
                "failures": a.last.failures,
                "server_restarts": a.last.restarts,
                "died": a.died,
            }
            for a in self.actors.values()
        ]
