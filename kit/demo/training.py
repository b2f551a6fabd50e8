"""Training the demo models: conversations tokenized, packed into rows, loss on the completions only.

Each conversation is its prompt as the chat template writes it for a request (so the model meets
exactly what an engine will send it) followed by its completion. Completion tokens carry the full
loss, prompt tokens a smaller weight (they still teach words and JSON, from the tool schemas).
Whole conversations are packed into rows of one length (first fit, longest first), so no tool
list is cut from the call that reads it.
"""

from __future__ import annotations

import random

from kit.demo.corpus import Example, render


def encode(corpus: list[Example], tokenizer) -> list[tuple[list[int], int]]:
    """Each conversation as (token ids of prompt + completion, number of prompt tokens)."""
    prompts, completions = zip(*(render(ex, tokenizer) for ex in corpus), strict=True)
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
    return [(p + c, len(p)) for p, c in zip(prompt_ids, completion_ids, strict=True)]


def pack(encoded: list[tuple[list[int], int]], pad_id: int, prompt_weight: float, multiple: int = 64):
    """Token ids and loss weights, two [rows, length] tensors: whole conversations packed first fit."""
    import torch

    length = -(-max(len(ids) for ids, _ in encoded) // multiple) * multiple
    rows: list[tuple[list[int], list[float]]] = []
    for ids, n_prompt in sorted(encoded, key=lambda e: -len(e[0])):
        weights = [prompt_weight] * n_prompt + [1.0] * (len(ids) - n_prompt)
        row = next((r for r in rows if len(r[0]) + len(ids) <= length), None)
        if row is None:
            rows.append((list(ids), weights))
        else:
            row[0].extend(ids)
            row[1].extend(weights)
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


def train(
    model,
    encoded,
    *,
    steps: int,
    seed: int,
    pad_id: int,
    desc: str,
    quiet: bool,
    batch: int = 2,
    lr: float = 5e-3,
    prompt_weight: float = 0.6,
) -> float:
    """AdamW with a one-cycle schedule over shuffled packed rows; returns the last step's loss."""
    import torch

    from kit.progress import progress

    inputs, weights = pack(encoded, pad_id, prompt_weight)
    order = list(range(len(inputs)))
    random.Random(seed).shuffle(order)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    loss_value = float("nan")
    bar = progress(range(steps), desc=desc, disable=quiet)
    for step in bar:
        pick = [order[(step * batch + k) % len(order)] for k in range(batch)]
        loss = weighted_loss(model, inputs[pick], weights[pick])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.2f}", refresh=False)
    return loss_value
