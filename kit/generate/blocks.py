"""A Ray job's work in blocks: cut from the pending items, handed to actors, handed again when an
actor dies, done only once an actor says its rows are in shards on disk.

Pure bookkeeping (no Ray here, so it is tested without a cluster). A block keeps the job's order
(longest first): blocks are handed out in it, and a dead actor's blocks go back to the front.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

BLOCKS_PER_ACTOR = 8
"""Blocks per actor by default: enough to re-balance a slow actor and to lose little with a dead one."""
MIN_BLOCK_FACTOR = 4
"""A block holds at least this many times an actor's requests in flight, so that one actor's
switch from one block to the next stays a small part of the block."""
MAX_BLOCK_ROWS = 20_000


@dataclass
class Block:
    index: int
    items: list[tuple[int, int]]
    """(row of the prompt table, sample index) of each work item."""
    actor: int | None = None
    """The actor it is handed to now (None: waiting)."""
    handed: int = 0
    """How many times it was handed out (more than once: an actor died with it)."""
    done: bool = False

    def tag(self, actor: int) -> str:
        return block_tag(self.index, actor)


def block_tag(index: int, actor: int) -> str:
    """The shard tag of block `index`'s rows as `actor` writes them (`part-<tag>-NNNNN.parquet`)."""
    return f"b{index:05d}a{actor}"


def block_rows(total: int, actors: int, in_flight: int, asked: int | None) -> int:
    """Work items per block: `asked`, else about BLOCKS_PER_ACTOR blocks per actor, at least
    MIN_BLOCK_FACTOR times an actor's requests in flight, at most MAX_BLOCK_ROWS."""
    if asked:
        return asked
    even = -(-total // max(actors * BLOCKS_PER_ACTOR, 1))
    return int(max(1, min(MAX_BLOCK_ROWS, max(even, MIN_BLOCK_FACTOR * in_flight))))


def cut_blocks(work: list[tuple[int, int]], size: int) -> list[Block]:
    return [Block(i, work[start : start + size]) for i, start in enumerate(range(0, len(work), size))]


@dataclass
class BlockBook:
    """Which block is where: waiting, with an actor, or done."""

    blocks: list[Block]
    waiting: deque[int] = field(default_factory=deque)
    on_disk_before_handed_again: int = 0
    """Items of dead actors' blocks found on disk when the block was handed again (not redone)."""

    def __post_init__(self) -> None:
        self.waiting = deque(b.index for b in self.blocks)

    def hand(self, actor: int) -> Block | None:
        """The next waiting block, now `actor`'s; None when none waits."""
        if not self.waiting:
            return None
        block = self.blocks[self.waiting.popleft()]
        block.actor, block.handed = actor, block.handed + 1
        return block

    def done(self, index: int) -> None:
        block = self.blocks[index]
        block.done, block.actor = True, None

    def held_by(self, actor: int) -> list[Block]:
        return [b for b in self.blocks if b.actor == actor and not b.done]

    def take_back(self, actor: int, on_disk: Callable[[Block], set[int]]) -> list[Block]:
        """The blocks of an actor that died, back to the front of the queue in their order, less
        their items already on disk (`on_disk(block)`: positions in block.items): a block's rows
        are written in shards as they come, so part of it may be done."""
        back = self.held_by(actor)
        for block in reversed(back):
            done = on_disk(block)
            if done:
                block.items = [it for i, it in enumerate(block.items) if i not in done]
                self.on_disk_before_handed_again += len(done)
            block.actor = None
            if block.items:
                self.waiting.appendleft(block.index)
            else:
                block.done = True
        return back

    @property
    def finished(self) -> bool:
        return all(b.done for b in self.blocks)

    def items_done(self) -> int:
        return sum(len(b.items) for b in self.blocks if b.done) + self.on_disk_before_handed_again

    def summary(self) -> dict[str, int]:
        return {
            "blocks": len(self.blocks),
            "blocks_done": sum(b.done for b in self.blocks),
            "blocks_handed_again": sum(b.handed > 1 for b in self.blocks),
            "items_found_on_disk_when_handed_again": self.on_disk_before_handed_again,
        }


def positions_done(items: Iterable[str], done: set[str]) -> set[int]:
    """Positions of `items` (row ids, in a block's order) that are in `done`."""
    return {i for i, rid in enumerate(items) if rid in done}
