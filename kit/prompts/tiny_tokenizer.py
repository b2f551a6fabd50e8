"""A tiny byte-level BPE tokenizer with a Qwen-style chat template, trained locally in a second.

For tests and benchmarks that need "the model's own tokenizer and chat template" without a
download: it saves as a transformers `PreTrainedTokenizerFast`, so `AutoTokenizer.from_pretrained`
and `apply_chat_template(messages, tools=...)` work on it like on a real model directory.
"""

from __future__ import annotations

import random
from pathlib import Path

from kit.prompts import fixture_text as text

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object within <tool_call></tool_call> tags."
    "<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _corpus(seed: int = 0) -> list[str]:
    """Training text: the fixture templates, filled in, in English and Chinese."""
    rng = random.Random(seed)
    lines = [text.request(rng) for _ in range(400)] + [text.zh_request(rng) for _ in range(200)]
    lines += [text.math_question(rng) for _ in range(200)] + list(text.long_document(rng) for _ in range(5))
    lines += [text.code_request(rng, lang) for lang in text.CODE_LANGS for _ in range(20)]
    lines += [text.hermes_system([t for _, t in text.TOOLS]), text.AGENT_INSTRUCTIONS]
    return lines


def write_tokenizer(out_dir: Path, vocab_size: int = 2048) -> Path:
    """Train and save the tokenizer into `out_dir` (tokenizer.json + config); return `out_dir`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    out_dir = Path(out_dir)
    fast.save_pretrained(out_dir)
    return out_dir
