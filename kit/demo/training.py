"""Training the demo model: conversations tokenized, packed into rows, loss weighted to the completions.

Each conversation is its prompt as the chat template writes it for a request (so the model meets
what an engine will send it) followed by its completion. Completion tokens carry the full loss,
prompt tokens a small weight. A prompt longer than `window` tokens keeps only its last `window`
tokens: the user's request and the end of the tool list, which is what the answer reads; the
whole tool list twice over (system prompt and template) would triple the cost of a tool call.
Conversations are packed whole into rows of one length (first fit, longest first).

Training is deterministic: `deterministic()` seeds torch (the corpus and the row order have their
own seeded generators), asks it for deterministic algorithms and fixes its thread count; with the
kernels pinned to AVX2 (kit.demo.model.PINNED_KERNELS) the same code and packages give the same bytes
on every x86-64 CPU with AVX2 (tests/test_demo_model.py builds twice).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

from kit.demo.corpus import Example, render
from kit.progress import progress

Encoded = list[tuple[list[int], int]]
"""Per conversation: token ids (prompt then completion) and the number of prompt tokens."""


def encode(corpus: list[Example], tokenizer, window: int, length: int) -> Encoded:
    """Each conversation's ids, its prompt cut from the left to `window` tokens and to fit `length`."""
    prompts, completions = zip(*(render(ex, tokenizer) for ex in corpus), strict=True)
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
    out = []
    for p, c in zip(prompt_ids, completion_ids, strict=True):
        keep = min(len(p), window, length - len(c))
        if keep > 0:
            out.append((p[len(p) - keep :] + c, keep))
    return out


def pack(encoded: Encoded, pad_id: int, prompt_weight: float, length: int):
    """Token ids and loss weights, two [rows, length] tensors: whole conversations packed first fit."""
    import torch

    rows: list[tuple[list[int], list[float]]] = []
    room: list[int] = []
    for ids, n_prompt in sorted(encoded, key=lambda e: -len(e[0])):
        weights = [prompt_weight] * n_prompt + [1.0] * (len(ids) - n_prompt)
        i = next((i for i, free in enumerate(room) if free >= len(ids)), None)
        if i is None:
            rows.append(([], []))
            room.append(length)
            i = len(rows) - 1
        rows[i][0].extend(ids)
        rows[i][1].extend(weights)
        room[i] -= len(ids)
    inputs = torch.full((len(rows), length), pad_id)
    loss_weights = torch.zeros((len(rows), length))
    for i, (ids, weights) in enumerate(rows):
        inputs[i, : len(ids)] = torch.tensor(ids)
        loss_weights[i, : len(weights)] = torch.tensor(weights)
    return inputs, loss_weights


def weighted_loss(model, ids, weights):
    """Next-token cross entropy, each target token weighted."""
    import torch.nn.functional as F

    logits = model(input_ids=ids).logits[:, :-1]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    w = weights[:, 1:].reshape(-1)
    return (ce * w).sum() / w.sum()


TRAIN_THREADS = 1
"""Torch threads while training: one fixed count, so that no float reduction is split differently
on a machine with more cores or under another OMP_NUM_THREADS; one, because two threads on a busy
2-core machine wait on each other (0.33 s a step against 0.18 for one, at load 3)."""


@contextlib.contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """Seeded, deterministic torch on a fixed number of threads; the caller's settings come back after."""
    import torch

    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(TRAIN_THREADS)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(strict, warn_only=warn_only)


def train(
    model, inputs, weights, *, steps: int, seed: int, batch: int, lr: float, desc: str, quiet: bool
) -> float:
    """AdamW with a one-cycle schedule over the shuffled packed rows; returns the last step's loss."""
    import torch

    order = list(range(len(inputs)))
    random.Random(seed).shuffle(order)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    loss_value = float("nan")
    bar = progress(range(steps), desc=desc, disable=quiet)
    for step in bar:
        rows = [order[(step * batch + k) % len(order)] for k in range(batch)]
        loss = weighted_loss(model, inputs[rows], weights[rows])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.2f}", refresh=False)
    return loss_value
