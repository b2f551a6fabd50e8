"""The exported folder's dataset card (README.md) in the Hugging Face Hub's format.

The YAML header is made by the libraries that read it: `huggingface_hub.DatasetCardData` for the
card's fields, `datasets.DatasetInfosDict.to_dataset_card_data` for `dataset_info` (features and
split sizes, which `datasets.load_dataset` checks against the files), and `configs` naming each
split's files. The body says how the data was made: model, engine, the decision, sampling,
sources before and after filtering, each drop rule with its count, and how to load it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData

from kit.artifacts import Decision, Manifest
from kit.params import RunParams

SIZE_CATEGORIES = [
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
]


def size_category(rows: int) -> str:
    """The Hub's size category of a dataset of `rows` rows."""
    return next((name for limit, name in SIZE_CATEGORIES if rows < limit), "n>1T")


@dataclass
class CardFacts:
    """What the card states, gathered from the run folder and the export."""

    run: str
    schema: pa.Schema
    splits: dict[str, int]
    split_bytes: dict[str, int]
    files_bytes: int
    drop_rules: tuple[str, ...]
    reasons: dict[str, int]
    sources: dict[str, dict[str, int | None]]
    fmt: str
    reasoning: str
    complete: bool
    params: RunParams | None = None
    manifest: Manifest | None = None
    decision: Decision | None = None
    decision_text: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)


def stored(facts: CardFacts) -> list[str]:
    """The splits that hold rows (an empty one has no file: `datasets` cannot load a split of none)."""
    return [s for s, n in facts.splits.items() if n]


def card_data(facts: CardFacts) -> DatasetCardData:
    """The card's YAML header: license, task, size, configs (the split files) and dataset_info."""
    params = facts.params
    license_id = (params.export.license if params else None) or "unknown"
    data = DatasetCardData(
        license=license_id,
        task_categories=["text-generation"],
        size_categories=[size_category(facts.splits.get("train", 0))],
        pretty_name=(params.export.pretty_name if params else None) or f"kit run {facts.run}",
        tags=["synthetic", "kit"],
        configs=[
            {
                "config_name": "default",
                "data_files": [{"split": s, "path": f"data/{s}-*"} for s in stored(facts)],
            }
        ],
    )
    info = datasets.DatasetInfo(
        features=datasets.Features.from_arrow_schema(facts.schema),
        splits=datasets.SplitDict(
            {
                s: datasets.SplitInfo(name=s, num_bytes=facts.split_bytes[s], num_examples=facts.splits[s])
                for s in stored(facts)
            }
        ),
        download_size=facts.files_bytes,
        dataset_size=sum(facts.split_bytes.values()),
    )
    DatasetInfosDict({"default": info}).to_dataset_card_data(data)
    return data


def model_revision(params: RunParams | None) -> str:
    """The model's revision: the Hub commit a downloaded snapshot names, else a hash of config.json."""
    if params is None:
        return "unknown (params.yaml unreadable)"
    path = Path(params.model.path)
    if path.parent.name == "snapshots" and len(path.name) == 40:
        return f"Hub commit {path.name}"
    config = path / "config.json"
    if config.is_file():
        return f"config.json sha256 {hashlib.sha256(config.read_bytes()).hexdigest()[:16]}"
    return "unknown (no config.json beside the model)"


def _model_lines(facts: CardFacts) -> list[str]:
    params, engine = facts.params, facts.engine
    name = engine.get("model") or (params.model.served_name if params else None)
    if params is not None and not name:
        name = Path(params.model.path).name
    versions = engine.get("versions") or {}
    version = ", ".join(f"{k} {v}" for k, v in versions.items()) if isinstance(versions, dict) else versions
    spec = engine.get("speculative") or "off"
    return [
        f"- **Model**: `{name or 'unknown'}` ({model_revision(params)})"
        + (f", from `{params.model.path}`" if params else ""),
        f"- **Engine**: {engine.get('flavor', 'unknown')}"
        + (f" ({version})" if version else "")
        + f"; speculative decoding: `{json.dumps(spec) if isinstance(spec, dict) else spec}`",
        f"- **Decision** (stage 2): {facts.decision_text or 'not decided (no decision.json)'}",
        f"- **Sampling**: `{json.dumps(facts.sampling, sort_keys=True)}`",
    ]


def _sources_table(facts: CardFacts) -> list[str]:
    lines = [
        "| source | planned | generated | failed | train | rejected |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, c in sorted(facts.sources.items()):
        cells = [c.get(k) for k in ("planned", "generated", "failed", "train", "rejected")]
        lines.append(f"| {name} | " + " | ".join("–" if v is None else f"{v:,}" for v in cells) + " |")
    return lines


def _reasons_table(facts: CardFacts) -> list[str]:
    lines = ["| drop rule | rows |", "|---|---:|"]
    lines += [f"| `{rule}` | {facts.reasons.get(rule, 0):,} |" for rule in facts.drop_rules]
    return lines


def card_body(facts: CardFacts) -> str:
    """The card's Markdown body."""
    total = sum(facts.splits.values())
    state = (
        "The run was **complete** when exported."
        if facts.complete
        else "**The run was incomplete when exported** (`--allow-incomplete`): rows the run had not "
        "generated yet are missing, and the counts below are of what was there."
    )
    shape = (
        "`messages`: the prompt's chat messages with the generated assistant turn appended "
        + (
            "(reasoning inline as a `<think>` block before the answer)"
            if facts.reasoning == "inline"
            else "(reasoning in `reasoning_content`)"
        )
        + ", tool calls in the OpenAI shape, `tools` as JSON text"
        if facts.fmt == "messages"
        else "`raw`: the run's own row schema (kit/generate/store.py)"
    )
    parts = [
        f"# {facts.run}",
        "",
        f"Completions generated by the kit's run `{facts.run}`: {facts.splits.get('train', 0):,} rows in "
        f"`train`, {facts.splits.get('rejected', 0):,} in `rejected` ({total:,} in all"
        + (
            "; a split of no rows has no files, so `load_dataset` does not list it"
            if len(stored(facts)) < len(facts.splits)
            else ""
        )
        + f"). {state}",
        "",
        "## How it was made",
        "",
        *_model_lines(facts),
        "",
        "## Sources",
        "",
        "Prompts planned per source (after the plan's filters), rows generated, requests that failed,",
        "and where the rows went:",
        "",
        *_sources_table(facts),
        "",
        "## What was dropped",
        "",
        "A row goes to `rejected` under the first of these rules it meets (its `drop_reason` column);",
        "for `duplicate` and `near_duplicate*` one row of each group stays in `train`:",
        "",
        *_reasons_table(facts),
        "",
        f"Row shape: {shape}.",
        "",
        "## Load it",
        "",
        "```python",
        "from datasets import load_dataset",
        'ds = load_dataset("path/to/this/folder")   # or the Hub repo it was pushed to',
        'train, rejected = ds["train"], ds["rejected"]',
        "```",
    ]
    if facts.gaps:
        parts += ["", "## Gaps", "", "Parts of the run folder that could not be read:", ""]
        parts += [f"- {g}" for g in facts.gaps]
    return "\n".join(parts) + "\n"


def dataset_card(facts: CardFacts) -> DatasetCard:
    """The whole card, as huggingface_hub reads it."""
    return DatasetCard(f"---\n{card_data(facts).to_yaml()}\n---\n\n{card_body(facts)}")
