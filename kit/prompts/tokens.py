"""Prompt length in tokens, counted the way the server will: the model's tokenizer and chat template."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kit.errors import DataError
from kit.prompts.adapters import PromptRow

TEMPLATE_ERROR = -1
"""Count reported for a prompt the chat template refuses to render (e.g. a role order it rejects)."""


POOL_MIN = 5000
"""Prompts in one `count` call from which counting goes to worker processes (smaller: in process)."""
POOL_BATCH = 2048
"""Prompts per task sent to a worker."""


class TokenCounter:
    """Counts `apply_chat_template(messages, tools=..., add_generation_prompt=True)` tokens, in batches.

    A call with at least `pool_min` prompts is split over `workers` processes (each loads the
    tokenizer once), so rendering and encoding use every core; `pool_min=None` never starts them.
    Use as a context manager (or call `close`) to stop the workers.
    """

    def __init__(
        self, tokenizer_dir: Path, pool_min: int | None = POOL_MIN, workers: int | None = None
    ) -> None:
        from transformers import AutoTokenizer

        self.tokenizer_dir = Path(tokenizer_dir)
        self.pool_min = pool_min
        self.workers = workers or min(os.cpu_count() or 1, 8)
        self._pool: ProcessPoolExecutor | None = None

        try:
            self.tokenizer: Any = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        except Exception as e:  # transformers raises OSError, ValueError, ... for a bad directory
            raise DataError(
                f"cannot load a tokenizer from {tokenizer_dir} ({type(e).__name__}: {e}). The prompt token "
                "filter needs the model directory with its tokenizer files (tokenizer.json, "
                "tokenizer_config.json)."
            ) from None
        if not getattr(self.tokenizer, "chat_template", None):
            raise DataError(
                f"the tokenizer in {tokenizer_dir} has no chat template, so prompt tokens cannot be counted "
                "as the server will count them. Use a chat (instruct) model directory, or add "
                "chat_template.jinja to it."
            )
        self._backend = getattr(self.tokenizer, "backend_tokenizer", None)
        self._pieces = PieceCounter(self._backend) if self._backend is not None else None
        self._fast: dict[bool, Any] = {}
        self._template_kwargs = dict(self.tokenizer.special_tokens_map)

    def __enter__(self) -> TokenCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def count(self, rows: list[PromptRow]) -> list[int]:
        """Tokens of each rendered prompt; `TEMPLATE_ERROR` where the template refuses the row."""
        return self.submit(rows).result()

    def uses_pool(self, n: int) -> bool:
        """Whether `n` prompts are enough to count them in the worker processes."""
        return self.pool_min is not None and n >= self.pool_min and self.workers > 1

    def submit(self, rows: list[PromptRow], pool: bool | None = None) -> Future[list[int]]:
        """Start counting `rows`; the future's result is what `count` returns (in order).

        `pool`: count in the workers (True), in this process (False), or by size (None: `uses_pool`).
        """
        pairs = [(r.messages, r.tools) for r in rows]
        if not pairs or not (self.uses_pool(len(pairs)) if pool is None else pool and self.workers > 1):
            done: Future[list[int]] = Future()
            done.set_result(self._count_pairs(pairs))
            return done
        pool = self._start_pool()
        parts = [pool.submit(_count_in_worker, b) for b in _batches(pairs, POOL_BATCH)]
        return _joined(parts)

    def _start_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context(method),
                initializer=_init_worker,
                initargs=(self.tokenizer_dir,),
            )
        return self._pool

    def _count_pairs(self, pairs: list[tuple[list[dict], str | None]]) -> list[int]:
        rows = [PromptRow(messages, tools, "", "") for messages, tools in pairs]
        texts = self.render(rows)
        ok = [i for i, t in enumerate(texts) if t is not None]
        counts = [TEMPLATE_ERROR] * len(rows)
        for i, n in zip(ok, self._encode_lengths([texts[i] for i in ok]), strict=True):
            counts[i] = n
        return counts

    def render(self, rows: list[PromptRow]) -> list[str | None]:
        """The chat-template text of each row; rows that share tools are rendered in one call."""
        groups: dict[str | None, list[int]] = defaultdict(list)
        for i, row in enumerate(rows):
            groups[row.tools].append(i)
        out: list[str | None] = [None] * len(rows)
        for tools, idx in groups.items():
            parsed = json.loads(tools) if tools else None
            for i, text in zip(idx, self._render_group([rows[i].messages for i in idx], parsed), strict=True):
                out[i] = text
        return out

    def _render_group(self, conversations: list[list[dict]], tools: list | None) -> list[str | None]:
        try:
            return list(self._apply(conversations, tools))
        except Exception:  # one bad row fails the batch: render one by one to find it
            out: list[str | None] = []
            for conversation in conversations:
                try:
                    out.append(self._apply([conversation], tools)[0])
                except Exception:
                    out.append(None)
            return out

    def _apply(self, conversations: list[list[dict]], tools: list | None) -> list[str]:
        fast = self._fast_template(conversations, tools)
        if fast is not None:
            kwargs = self._template_kwargs
            return [
                fast.render(messages=c, tools=tools, documents=None, add_generation_prompt=True, **kwargs)
                for c in conversations
            ]
        return self._slow_apply(conversations, tools)

    def _slow_apply(self, conversations: list[list[dict]], tools: list | None) -> list[str]:
        return self.tokenizer.apply_chat_template(
            conversations, tools=tools, add_generation_prompt=True, tokenize=False
        )

    def _fast_template(self, conversations: list[list[dict]], tools: list | None) -> Any:
        """The compiled chat template, called directly (apply_chat_template copies every message first).

        Used once its output matched `apply_chat_template` on the first rows, with and without tools.
        """
        key = tools is not None
        if key not in self._fast:
            self._fast[key] = None
            try:
                from transformers.utils.chat_template_utils import _compile_jinja_template

                template = _compile_jinja_template(self.tokenizer.get_chat_template(None, tools))
                sample = conversations[:8]
                rendered = [
                    template.render(
                        messages=c,
                        tools=tools,
                        documents=None,
                        add_generation_prompt=True,
                        **self._template_kwargs,
                    )
                    for c in sample
                ]
                if rendered == self._slow_apply(sample, tools):
                    self._fast[key] = template
            except Exception:  # a private helper of transformers: any trouble means the public path
                pass
        return self._fast[key]

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        if self._pieces is not None and self._pieces.usable:
            counts = self._pieces.lengths(texts)
            if self._pieces.verified or self._pieces.verify(texts[:64], counts[:64], self._full_lengths):
                return counts
        return self._full_lengths(texts)

    def _full_lengths(self, texts: list[str]) -> list[int]:
        if self._backend is not None:  # Rust batch encoding, no Python id lists
            encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            return [len(e) for e in encode(texts, add_special_tokens=False)]
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


class PieceCounter:
    """Counts tokens piece by piece between added tokens (`<|im_start|>`...), caching each piece.

    A fast tokenizer splits text on its added tokens before anything else and encodes the pieces
    independently, so the count of a rendered prompt is the sum over its pieces plus one per added
    token. Pieces repeat across prompts (system prompts, tool lists, AgentInstruct's in-context
    example), so each is encoded once. Used only when the added tokens strip no whitespace, and
    checked against whole-text encoding on the first batch; any difference turns it off.
    """

    MAX_CACHED = 1_000_000

    def __init__(self, backend: Any) -> None:
        added = list(backend.get_added_tokens_decoder().values())
        plain = all(not (t.lstrip or t.rstrip or t.single_word) for t in added)
        plain = plain and (backend.normalizer is None or not any(t.normalized for t in added))
        contents = sorted({t.content for t in added}, key=len, reverse=True)
        self.usable = plain and bool(contents)
        self.verified = False
        self._split = re.compile("(" + "|".join(map(re.escape, contents)) + ")") if contents else None
        self._specials = set(contents)
        self._backend = backend
        self._cache: dict[int, int] = {}

    def lengths(self, texts: list[str]) -> list[int]:
        """Token count of each text (the cache keys pieces by hash, so it holds no text)."""
        assert self._split is not None
        split = [self._split.split(t) for t in texts]
        cache, specials = self._cache, self._specials
        todo = {p for parts in split for p in parts if p and p not in specials and hash(p) not in cache}
        if len(cache) + len(todo) > self.MAX_CACHED:
            cache.clear()  # and every piece of these texts is to count again, cached or not
            todo = {p for parts in split for p in parts if p and p not in specials}
        if todo:
            pieces = list(todo)
            encodings = self._backend.encode_batch_fast(pieces, add_special_tokens=False)
            cache.update(zip(map(hash, pieces), (len(e) for e in encodings), strict=True))
        return [sum(1 if p in specials else cache[hash(p)] for p in parts if p) for parts in split]

    def verify(self, texts: list[str], counts: list[int], full: Callable[[list[str]], list[int]]) -> bool:
        """Compare with whole-text counts; turn piecewise counting off on any difference."""
        self.verified = full(texts) == counts
        self.usable = self.verified
        return self.verified


_WORKER: TokenCounter | None = None


def _init_worker(tokenizer_dir: Path) -> None:
    """Load the tokenizer once per worker process; one encoding thread each (the pool is the parallelism)."""
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER = TokenCounter(tokenizer_dir, pool_min=None)


def _count_in_worker(pairs: list[tuple[list[dict], str | None]]) -> list[int]:
    assert _WORKER is not None
    return _WORKER._count_pairs(pairs)


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _joined(parts: list[Future[list[int]]]) -> Future[list[int]]:
    """One future whose result is the concatenation of `parts`' results, in order."""
    out: Future[list[int]] = Future()
    left = [len(parts)]

    def done(_: Future) -> None:
        left[0] -= 1
        if left[0] == 0:
            try:
                out.set_result([n for p in parts for n in p.result()])
            except BaseException as e:
                out.set_exception(e)

    for p in parts:
        p.add_done_callback(done)
    return out
