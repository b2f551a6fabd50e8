"""Prompt tokens the engine decodes from, for function-calling rows: tools in one place (the `tools`
field the chat template renders) against the source's system prompt listing them as well.

    .venv/bin/kit demo-assets
    .venv/bin/python benchmarks/bench_tools_once.py                     # the demo's fixture rows
    .venv/bin/python benchmarks/bench_tools_once.py --data my_hermes.jsonl --model /models/Qwen3-8B

Each row of the Hermes file goes through the `hermes_fc` adapter (system prompt without its `<tools>`
listing) and, for the comparison, through the same cut of the conversation with the system prompt
as the source has it; both are rendered with the model's chat template and the row's tools, with
the generation prompt, and counted with its tokenizer. docs/export.md quotes the result.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / ".cache/demo/data/hermes_fc.jsonl")
    ap.add_argument("--model", type=Path, default=REPO / ".cache/demo/model")
    args = ap.parse_args()

    import datasets
    from transformers import AutoTokenizer

    from kit.prompts import get_adapter
    from kit.prompts.adapters import sharegpt_prompt

    tok = AutoTokenizer.from_pretrained(args.model)
    rows = datasets.load_dataset("json", data_files=str(args.data), split="train").to_list()

    def tokens(messages: list[dict], tools: list[dict]) -> int:
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        return len(tok(text, add_special_tokens=False)["input_ids"])

    both, once = [], []
    for i, row in enumerate(rows):
        out = get_adapter("hermes_fc")(row, i)
        tools = json.loads(out.tools)
        both.append(tokens(sharegpt_prompt(row["conversations"])[0], tools))
        once.append(tokens(out.messages, tools))
    saved = [b - o for b, o in zip(both, once, strict=True)]
    median = statistics.median
    print(
        f"{len(rows)} rows of {args.data.name}, tokenizer {args.model}: "
        f"{sum(both):,} prompt tokens with the tools listed twice, {sum(once):,} once: "
        f"{sum(saved):,} saved ({sum(saved) / sum(both):.1%}); per row median {median(both):.0f} -> "
        f"{median(once):.0f}, saved {min(saved)} to {max(saved)} (median {median(saved):.0f})"
    )


if __name__ == "__main__":
    main()
