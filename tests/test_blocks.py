"""A Ray job's blocks (kit.generate.blocks): cut in the job's order, handed out, taken back from a
dead actor less what its shards hold, done once. Pure bookkeeping, no cluster."""

from __future__ import annotations

from kit.generate.blocks import BlockBook, block_rows, cut_blocks, positions_done


def test_blocks_keep_the_order_and_every_item_once() -> None:
    work = [(r, 0) for r in range(10)]
    blocks = cut_blocks(work, 4)
    assert [len(b.items) for b in blocks] == [4, 4, 2]
    assert [it for b in blocks for it in b.items] == work


def test_block_size_default_asked_and_bounds() -> None:
    assert block_rows(1000, 2, 8, asked=50) == 50
    assert block_rows(1600, 2, 8, asked=None) == 100  # 8 blocks per actor
    assert block_rows(100, 2, 64, asked=None) == 256  # at least 4x an actor's requests in flight
    assert block_rows(10_000_000, 2, 64, asked=None) == 20_000


def test_a_dead_actors_blocks_go_back_first_less_what_is_on_disk() -> None:
    book = BlockBook(cut_blocks([(r, 0) for r in range(12)], 4))
    a0, a1 = book.hand(0), book.hand(1)
    assert (a0.index, a1.index) == (0, 1)
    book.done(1)
    # actor 0 dies with block 0, two of its rows written; block 2 was still waiting
    back = book.take_back(0, lambda b: {0, 2})
    assert [b.index for b in back] == [0]
    assert list(book.waiting) == [0, 2]  # handed again before the blocks that never were
    again = book.hand(1)
    assert again.index == 0 and again.items == [(1, 0), (3, 0)] and again.handed == 2
    book.done(0)
    book.done(book.hand(1).index)
    assert book.finished
    assert book.items_done() == 12  # 2 found on disk + 2 redone + 4 + 4
    assert book.summary()["blocks_handed_again"] == 1


def test_a_block_wholly_on_disk_is_done_without_an_actor() -> None:
    book = BlockBook(cut_blocks([(r, 0) for r in range(4)], 4))
    book.hand(0)
    book.take_back(0, lambda b: set(range(len(b.items))))
    assert book.finished and not book.waiting


def test_positions_done() -> None:
    assert positions_done(["a", "b", "a.1"], {"a.1", "z"}) == {2}
