"""A tiny tokenizer trained on the fixture text (see kit.demo.tokenizer), for tests and benchmarks.

For tests and benchmarks that need "the model's own tokenizer and chat template" without a
download: it saves as a transformers `PreTrainedTokenizerFast`, so `AutoTokenizer.from_pretrained`
and `apply_chat_template(messages, tools=...)` work on it like on a real model directory.
"""

from __future__ import annotations

import random
from pathlib import Path

from kit.demo import fixture_text as text
from kit.demo.tokenizer import train_tokenizer


def corpus(seed: int = 0) -> list[str]:
    """Training text: the fixture templates, filled in, in English and Chinese."""
    rng = random.Random(seed)
    lines = [text.request(rng) for _ in range(400)] + [text.zh_request(rng) for _ in range(200)]
    lines += [text.math_question(rng) for _ in range(200)] + list(text.long_document(rng) for _ in range(5))
    lines += [text.code_request(rng, lang) for lang in text.CODE_LANGS for _ in range(20)]
    lines += [text.hermes_system([t for _, t in text.TOOLS]), text.AGENT_INSTRUCTIONS]
    return lines


def write_tokenizer(out_dir: Path, vocab_size: int = 2048) -> Path:
    """Train on the fixture text and save the tokenizer into `out_dir`; return `out_dir`."""
    out_dir = Path(out_dir)
    train_tokenizer(corpus(), vocab_size).save_pretrained(out_dir)
    return out_dir
