"""A byte-level BPE tokenizer with Qwen3's chat template, trained locally in about a second.

One place for the embedded demo model's tokenizer and for the small tokenizers tests and
benchmarks train on their own text. It saves as a transformers `PreTrainedTokenizerFast`, so
`AutoTokenizer.from_pretrained` and `apply_chat_template(messages, tools=..., enable_thinking=...)`
work on it like on a real model directory. As in Qwen3's tokenizer, the reasoning and tool-call
tags are single added tokens that are not special: they stay in decoded text (also with
`skip_special_tokens`), where the engines' reasoning and tool-call parsers look for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
"""Added as whole, non-special tokens, in this order (Qwen3 has the same six)."""

CHAT_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        ~ "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        ~ "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        ~ "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string
          and not (message.content.startswith('<tool_response>')
                   and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content =
                  content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n'
                + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if (loop.first and content) or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {%- if tool_call.function %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {{- tool_call.arguments if tool_call.arguments is string else tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
""".strip()
"""Qwen3's template: tools in the system turn, tool results as `<tool_response>` user turns,
`enable_thinking` (on by default; off pre-fills an empty think block in the generation prompt)."""


RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>", "content": "text"},
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)", "content": "text"},
    },
}
"""How `transformers serve` splits an answer (a tokenizer's `response_template`): the `<think>`
block into `reasoning_content`, everything else, `<tool_call>` blocks included, into the content.
Without it, transformers 5.24 uses its Qwen3 template, which also parses tool calls and answers
HTTP 500 to a call that is not valid JSON (one cut by max_tokens; the tiny model writes some).
"""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048, individual_digits: bool = False):
    """Train a byte-level BPE on `texts`; returns a PreTrainedTokenizerFast with the chat template.

    `individual_digits`: every digit its own token, as in Qwen's tokenizers (numbers stay well formed)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    digits = [pre_tokenizers.Digits(individual_digits=True)] if individual_digits else []
    tok.pre_tokenizer = pre_tokenizers.Sequence([*digits, byte_level])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_without_markup(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.response_template = RESPONSE_TEMPLATE
    return fast


def _without_markup(texts: Iterable[str]) -> Iterator[str]:
    """The texts with the added tags removed, so no BPE merges are spent on their pieces."""
    for text in texts:
        for tag in MARKUP_TOKENS:
            text = text.replace(tag, " ")
        yield text
