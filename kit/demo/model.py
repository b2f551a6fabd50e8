"""The embedded demo models: a tiny Qwen3-architecture causal LM and a smaller draft, built locally.

`ensure_demo_model(path)` trains a byte-level BPE tokenizer with Qwen3's chat template (see
kit.demo.tokenizer) and a ~0.5M-parameter Qwen3 model on a generated chat corpus (see
kit.demo.corpus) for about a minute of CPU time. Its completions read like words and follow
Qwen3's shapes: a `<think>` block when thinking is on, `<tool_call>` JSON when the system turn
lists tools, so real engines' reasoning and tool-call parsers have something to parse.
`ensure_demo_draft_model(path, target)` builds a one-layer sibling with the target's tokenizer,
trained on the same corpus for a few seconds, for draft-model speculative decoding. Both are
ordinary Hugging Face model directories. Everything is seeded; a directory is built in a
temporary folder and renamed into place, with a marker file written last, so an interrupted
build is simply redone.

    python -m kit.demo.model .cache/demo/model [.cache/demo/draft]   # build (or reuse) them
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kit.demo.corpus import examples, tokenizer_texts
from kit.demo.tokenizer import train_tokenizer
from kit.demo.training import encode, train

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
DRAFT_SHAPE = {**MODEL_SHAPE, "num_hidden_layers": 1}
VERSION = 4
CORPUS_SIZE = 4000
TOKENIZER_EXAMPLES = 1500
"""The BPE is trained on the first examples only: more text changes its merges little and costs seconds."""


def is_demo_model(path: Path, kind: str = "model") -> bool:
    """True when `path` holds a completely built demo model (or draft) of the current version."""
    marker = Path(path) / MARKER
    try:
        info = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return info.get("version") == VERSION and info.get("kind", "model") == kind


def ensure_demo_model(path: Path, *, train_steps: int = 540, seed: int = 0, quiet: bool = False) -> Path:
    """Build the demo model at `path` unless a complete one is already there; return `path`."""

    def build(out: Path) -> dict:
        corpus = examples(CORPUS_SIZE, seed)
        tokenizer = train_tokenizer(tokenizer_texts(corpus[:TOKENIZER_EXAMPLES]))
        return _build(out, tokenizer, corpus, MODEL_SHAPE, train_steps, seed, quiet, "training demo model")

    return _ensure(Path(path), "model", build)


def ensure_demo_draft_model(
    path: Path, target: Path, *, train_steps: int = 120, seed: int = 0, quiet: bool = False
) -> Path:
    """Build a one-layer draft for the demo model at `target` (same tokenizer) at `path`; return `path`."""
    from transformers import AutoTokenizer

    def build(out: Path) -> dict:
        tokenizer = AutoTokenizer.from_pretrained(target)
        corpus = examples(CORPUS_SIZE, seed)
        info = _build(out, tokenizer, corpus, DRAFT_SHAPE, train_steps, seed, quiet, "training demo draft")
        return {**info, "target": str(target)}

    return _ensure(Path(path), "draft", build)


def _ensure(path: Path, kind: str, build: Callable[[Path], dict]) -> Path:
    """Run `build` into a temporary folder beside `path`, then rename it into place, marker last."""
    if is_demo_model(path, kind):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".demo-{kind}-", dir=path.parent) as tmp:
        out = Path(tmp) / kind
        info = {"version": VERSION, "kind": kind, **build(out)}
        (out / MARKER).write_text(json.dumps(info, indent=2))
        if path.exists():
            shutil.rmtree(path)
        out.rename(path)
    return path


def _build(out: Path, tokenizer, corpus, shape: dict, steps: int, seed: int, quiet: bool, desc: str) -> dict:
    """Train a Qwen3 model of `shape` on `corpus` and save it with `tokenizer` into `out`."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **shape,
    )
    model = Qwen3ForCausalLM(config)
    started = time.perf_counter()
    loss = train(model, encode(corpus, tokenizer), steps=steps, seed=seed, pad_id=tokenizer.pad_token_id,
                 desc=desc, quiet=quiet)  # fmt: skip
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=True, temperature=0.7
    ).save_pretrained(out)
    return {
        "seed": seed,
        "train_steps": steps,
        "final_loss": round(loss, 4),
        "train_seconds": round(time.perf_counter() - started, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


if __name__ == "__main__":
    model_dir = ensure_demo_model(Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/demo/model"))
    print(model_dir)
    if len(sys.argv) > 2:
        print(ensure_demo_draft_model(Path(sys.argv[2]), model_dir))
