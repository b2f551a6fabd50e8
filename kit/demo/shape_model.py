"""Write a shape-only model folder (kit.modelshape): the published config, a padded tokenizer, the marker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kit.demo.tiny_tokenizer import corpus as fixture_corpus
from kit.demo.tokenizer import SPECIAL_TOKENS, train_tokenizer
from kit.errors import ParamsError
from kit.modelshape import CHATML, MARKER, MEANING, SHAPES, shape_of


def write_shape_model(name: str, out: str | Path, *, overwrite: bool = False) -> Path:
    """Write shape `name` (a key of SHAPES) into folder `out`: config.json, tokenizer, marker."""
    shape = SHAPES.get(name)
    if shape is None:
        raise ParamsError(f"no model shape {name!r}: the kit knows {', '.join(sorted(SHAPES))}")
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ParamsError(f"{out} exists and is not empty: pick an empty folder, or pass --force")
        if shape_of(out) is None:
            raise ParamsError(f"{out} holds a model that is not shape only: the kit does not overwrite it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(shape.config, indent=2) + "\n")
    text = shape.text
    generation = {"bos_token_id": text["bos_token_id"], "eos_token_id": text["eos_token_id"]}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    for name, content in shape.extra_files.items():
        (out / name).write_text(json.dumps(content, indent=2) + "\n")
    padded_tokenizer(text["vocab_size"], shape.tags).save_pretrained(out)
    marker = {"shape": shape.name, "source": shape.source, "weights": "none", "meaning": MEANING}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return out


def padded_tokenizer(vocab_size: int, fixed: dict[str, int] | None = None):
    """A byte-level BPE (kit.demo.tokenizer) with filler tokens up to `vocab_size` ids; `fixed`: more
    tokens at the ids their config gives them (a multimodal model's vision tags, which its processor
    looks up by name)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fixed = fixed or {}
    small = train_tokenizer(fixture_corpus(), vocab_size=2048)
    spec = json.loads(small.backend_tokenizer.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    # the added tags (not in the BPE vocabulary) go to the top ids, as in Qwen's tokenizers; the fixed
    # ones are vocabulary entries at their config's ids (the tokenizers library numbers added tokens
    # after the vocabulary, whatever id they are given); filler tokens take every id left, each
    # decoding to " w<n>": any id a random model emits is text
    tags = [t for t in spec["added_tokens"] if t["content"] not in vocab]
    for top, tag in enumerate(reversed(tags)):
        tag["id"] = vocab_size - 1 - top
    vocab.update(fixed)
    taken = set(vocab.values()) | {t["id"] for t in tags}
    filler = (i for i in range(vocab_size) if i not in taken)
    for n, i in enumerate(filler):
        vocab[f"\u0120w{n}"] = i
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        eos_token="<|im_end|>",
        pad_token=SPECIAL_TOKENS[0],
    )
    fast.chat_template = CHATML
    return fast
