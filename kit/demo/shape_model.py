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
    eos = shape.config["eos_token_id"]
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": shape.config["bos_token_id"], "eos_token_id": eos}, indent=2) + "\n"
    )
    padded_tokenizer(shape.config["vocab_size"]).save_pretrained(out)
    marker = {"shape": shape.name, "source": shape.source, "weights": "none", "meaning": MEANING}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return out


def padded_tokenizer(vocab_size: int):
    """A byte-level BPE (kit.demo.tokenizer) with filler tokens up to `vocab_size` ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    small = train_tokenizer(fixture_corpus(), vocab_size=2048)
    spec = json.loads(small.backend_tokenizer.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    # the added tags (not in the BPE vocabulary) go to the top ids, as in Qwen's tokenizers; filler
    # tokens take every id between, each decoding to " w<n>": any id a random model emits is text
    tags = [t for t in spec["added_tokens"] if t["content"] not in vocab]
    for top, tag in enumerate(reversed(tags)):
        tag["id"] = vocab_size - 1 - top
    for n, i in enumerate(range(len(vocab), vocab_size - len(tags))):
        vocab[f"\u0120w{n}"] = i
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        eos_token="<|im_end|>",
        pad_token=SPECIAL_TOKENS[0],
    )
    fast.chat_template = CHATML
    return fast
