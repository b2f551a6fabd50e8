"""The embedded demo model: a tiny Qwen3-architecture causal LM built locally, no download.

`ensure_demo_model(path)` trains a byte-level BPE tokenizer (Qwen-style chat template, see
kit.demo.tokenizer) and a ~0.5M-parameter Qwen3 model on a generated chat corpus for about a
minute of CPU time,
so its completions are word-like rather than noise, and saves both as an ordinary Hugging Face
model directory that `transformers serve` loads like any other. Everything is seeded; the
directory is built in a temporary folder and renamed into place, with a marker file written
last, so an interrupted build is simply redone.

    python -m kit.demo.model .cache/demo/model     # build (or reuse) the demo model
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kit.demo.corpus import chat_corpus
from kit.demo.tokenizer import train_tokenizer

MARKER = ".kit-demo-model.json"
MODEL_SHAPE = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
VERSION = 3


def is_demo_model(path: Path) -> bool:
    """True when `path` holds a completely built demo model of the current version."""
    marker = Path(path) / MARKER
    try:
        return json.loads(marker.read_text()).get("version") == VERSION
    except (OSError, json.JSONDecodeError):
        return False


def ensure_demo_model(path: Path, *, train_steps: int = 400, seed: int = 0, quiet: bool = False) -> Path:
    """Build the demo model at `path` unless a complete one is already there; return `path`."""
    path = Path(path)
    if is_demo_model(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".demo-model-", dir=path.parent) as tmp:
        build = Path(tmp) / "model"
        info = _build(build, train_steps=train_steps, seed=seed, quiet=quiet)
        (build / MARKER).write_text(json.dumps(info, indent=2))
        if path.exists():
            shutil.rmtree(path)
        build.rename(path)
    return path


def _build(out: Path, *, train_steps: int, seed: int, quiet: bool) -> dict:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    texts = chat_corpus(seed=seed)
    tokenizer = train_tokenizer(texts)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **MODEL_SHAPE,
    )
    model = Qwen3ForCausalLM(config)
    started = time.perf_counter()
    loss = _train(model, tokenizer, texts, steps=train_steps, seed=seed, quiet=quiet)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=True, temperature=0.7
    ).save_pretrained(out)
    return {
        "version": VERSION,
        "seed": seed,
        "train_steps": train_steps,
        "final_loss": round(loss, 4),
        "train_seconds": round(time.perf_counter() - started, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def _train(model, tokenizer, texts: list[str], *, steps: int, seed: int, quiet: bool) -> float:
    """Next-token training on the chat corpus packed into fixed-length blocks."""
    import torch

    from kit.progress import progress

    ids: list[int] = []
    for t in texts:
        ids.extend(tokenizer(t)["input_ids"])
    block, batch = 128, 16
    data = torch.tensor(ids[: len(ids) // block * block]).view(-1, block)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    model.train()
    loss_value = float("nan")
    bar = progress(range(steps), desc="training demo model", disable=quiet)
    for _ in bar:
        rows = data[torch.randint(len(data), (batch,), generator=gen)]
        loss = model(input_ids=rows, labels=rows).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.2f}", refresh=False)
    return loss_value


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/demo/model")
    print(ensure_demo_model(target))
