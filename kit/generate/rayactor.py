"""One engine replica as a Ray actor: the kit's own server lifecycle and client loop, fed blocks.

The actor starts its server with `start_server` (the reaper, so a killed actor takes its server
down; restarts and the hang watchdog of the pool), then runs one `GenerationLoop` for its whole
life over a `BlockFeed`: the driver hands blocks in ahead of need, so the loop's workers go from
one block to the next without draining the engine in between. Rows go to one shard writer per
block (`part-b<block>a<actor>-NNNNN.parquet`, checksummed like every shard); once every item of
a block is answered, its writer flushes and the block is reported done: a block is done only
when its rows are on disk.

The class is plain Python: `kit.generate.raydriver` makes it a Ray actor (Ray is imported there
only). Its async methods run on the actor's event loop, so `poll` answers while the loop runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa

from kit.artifacts.manifest_sections import ActorInfo
from kit.engines import start_server
from kit.errors import RunFolderError
from kit.generate.blocks import block_tag
from kit.generate.metrics import Timeline
from kit.generate.pool import ServerPool
from kit.generate.session import build_loop, engine_capacity, hang_timeout, loop_concurrency, replica_of
from kit.generate.store import FailureLog, ShardWriter
from kit.generate.work import iter_items
from kit.generate.work_item import GeneratedRow, WorkItem
from kit.params import RunParams
from kit.runfolder import RunFolder, write_json_atomic

log = logging.getLogger(__name__)


class ActorPlace(TypedDict):
    """Where an actor runs (`EngineActor.where`)."""

    actor: int
    pid: int
    host: str


class BlockFeed:
    """The actor's work items, as blocks arrive: `take` waits for more until `close`."""

    def __init__(self) -> None:
        self._items: deque[WorkItem] = deque()
        self._more = asyncio.Event()
        self._closed = False

    def put(self, items: list[WorkItem]) -> None:
        self._items.extend(items)
        self._more.set()

    def close(self) -> None:
        """No more blocks: the loop ends once the items given are answered."""
        self._closed = True
        self._more.set()

    async def take(self) -> WorkItem | None:
        while not self._items:
            if self._closed:
                return None
            self._more.clear()
            await self._more.wait()
        return self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class ActorPoll:
    """An actor's answer to `poll` (and `finish`): blocks done since the last poll, its loop's counters."""

    done: tuple[int, ...] = ()
    """Blocks whose rows are on disk since the last poll."""
    answered_open: int = 0
    """Items answered in blocks not done yet (for the driver's progress bar)."""
    rows: int = 0
    failures: int = 0
    output_tokens: int = 0
    in_flight: int = 0
    concurrency: int = 0
    restarts: int = 0
    """Server restarts so far."""
    engine: dict[str, float] = field(default_factory=dict)
    """The engine's gauges and counters at the loop's last sample (by their /metrics names)."""
    finished: bool = False


@dataclass
class OpenBlock:
    index: int
    writer: ShardWriter
    size: int
    left: int
    """Items not answered yet."""


class BlockWriter:
    """The loop's shard writer, one `ShardWriter` per open block: a row goes to its block's.

    `answered` counts each block down; at zero the block's writer writes what it holds and waits
    for its shards (in a thread, off the event loop), the failure log is flushed, and the block
    joins `done`."""

    def __init__(self, directory: Path, actor: int, failures: FailureLog) -> None:
        self.directory, self.actor, self.failures = directory, actor, failures
        self.open: dict[int, OpenBlock] = {}
        self.block_of: dict[str, int] = {}
        self.done: list[int] = []
        self._closing: set[asyncio.Task] = set()

    def open_block(self, index: int, ids: list[str]) -> None:
        writer = ShardWriter(self.directory, block_tag(index, self.actor))
        self.open[index] = OpenBlock(index, writer, size=len(ids), left=len(ids))
        self.block_of.update(dict.fromkeys(ids, index))

    def add(self, row: GeneratedRow) -> None:
        self.open[self.block_of[row["id"]]].writer.add(row)

    def answered(self, item: WorkItem) -> None:
        block = self.open[self.block_of.pop(item["id"])]
        block.left -= 1
        if block.left == 0:
            task = asyncio.get_running_loop().create_task(self._close(block))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close(self, block: OpenBlock) -> None:
        await asyncio.to_thread(block.writer.flush, self.failures.flush)
        block.writer.close()
        del self.open[block.index]
        self.done.append(block.index)

    def due(self, max_rows: int, max_seconds: float, max_bytes: float = float("inf")) -> bool:
        return any(b.writer.due(max_rows, max_seconds, max_bytes) for b in self.open.values())

    async def flush_async(self, *then: Any) -> None:
        for block in list(self.open.values()):
            await block.writer.flush_async()
        for step in then:
            step()

    def flush(self, *then: Any) -> None:
        for block in list(self.open.values()):
            block.writer.flush()
        for step in then:
            step()

    def items_answered_in_open_blocks(self) -> int:
        return sum(b.size - b.left for b in self.open.values())


class EngineActor:
    """One engine replica and the kit's client loop, on the resources the driver asked Ray for."""

    def __init__(self, params_json: str, root: str, index: int, rows_made_with: tuple[str, str, str]) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        params = RunParams.model_validate_json(params_json)
        self.params = params.model_copy(update={"engine": params.engine.model_copy(update={"replicas": 1})})
        self.folder = RunFolder(Path(root))
        self.index = index
        self.rows_made_with = rows_made_with
        self.feed = BlockFeed()
        self._stack = ExitStack()
        self._task: asyncio.Task | None = None
        self.writer: BlockWriter | None = None

    def where(self) -> ActorPlace:
        return {"actor": self.index, "pid": os.getpid(), "host": socket.gethostname()}

    async def start(self, total: int) -> ActorInfo:
        """Start the server (the kit's lifecycle) and the loop; return where it runs and its capacity."""
        if not self.folder.identity.exists():
            raise RunFolderError(
                f"{self.folder.root} is not visible from this Ray node ({socket.gethostname()}): a Ray "
                "job writes its rows into the run folder, which every node must see at the same path "
                "(a shared filesystem: NFS, Lustre, a mounted bucket). Mount it there and rerun."
            )
        params, folder = self.params, self.folder
        server = await asyncio.to_thread(
            self._stack.enter_context, start_server(params, folder.logs, name=f"ray-a{self.index}")
        )
        self.pool = ServerPool(
            [replica_of(params, server, params.engine.api_key())],
            params.generate.max_server_restarts,
            hang_timeout_s=hang_timeout(params.generate),
            first_answer_s=params.engine.startup_timeout_s,
        )
        await self.pool.__aenter__()
        cap = await engine_capacity(self.pool, params, [server])
        conc = loop_concurrency(params, cap.total)
        failures = FailureLog(folder.failures)
        self.writer = BlockWriter(folder.generations, self.index, failures)
        mine = folder.ray_actor(self.index)
        folder.ray_actors.mkdir(exist_ok=True)
        timeline = Timeline(mine.metrics, mine.metrics_log)
        self.loop = build_loop(
            params,
            self.pool,
            self.writer,
            failures,
            timeline,
            self.rows_made_with,
            concurrency=conc,
            answered=self.writer.answered,
            show_progress=False,
        )
        self._task = asyncio.get_running_loop().create_task(self.loop.run(self.feed, total, conc))
        log.info("actor %d: %s, %d in flight", self.index, cap.words(), conc)
        info: ActorInfo = {
            **self.where(),
            **cap.as_dict(),
            "concurrency": conc,
            "server_log": str(getattr(server, "log_path", "")),
            "reaper_pid": getattr(
                server, "pid", None
            ),  # the kit's wrapper: its child leads the server's group
        }
        write_json_atomic(mine.about, info)  # where it runs: what to look at, or to kill
        return info

    async def give(self, index: int, prompts: pa.Table, items: list[tuple[int, int]]) -> None:
        """A block: its prompts (the rows its items need) and its items (row in `prompts`, sample)."""
        work = list(iter_items(prompts, items))
        assert self.writer is not None, "start() first"
        self.writer.open_block(index, [w["id"] for w in work])
        self.feed.put(work)

    def close(self) -> None:
        """No more blocks for this actor."""
        self.feed.close()

    async def poll(self) -> ActorPoll:
        """Blocks done since the last poll and the loop's counters; raises the loop's error."""
        assert self._task is not None and self.writer is not None, "start() first"
        if self._task.done():
            self._task.result()  # the loop's error (a server that cannot come back) reaches the driver
        done, self.writer.done = self.writer.done, []
        s = self.loop.stats
        return ActorPoll(
            done=tuple(done),
            answered_open=self.writer.items_answered_in_open_blocks(),
            rows=s.rows,
            failures=s.failures,
            output_tokens=s.output_tokens,
            in_flight=s.in_flight,
            concurrency=s.concurrency,
            restarts=self.pool.restarts,
            engine=self.loop.engine_last,
            finished=self._task.done(),
        )

    async def finish(self) -> ActorPoll:
        """Wait for the loop to end (after `close`), stop the server; the last poll's figures."""
        assert self._task is not None
        await self._task
        last = await self.poll()
        await self.pool.__aexit__(None, None, None)
        await asyncio.to_thread(self._stack.close)
        return last
