"""The exported folder's dataset card (README.md) in the Hugging Face Hub's format.

The YAML header is made by the libraries that read it: `huggingface_hub.DatasetCardData` for the
card's fields, `datasets.DatasetInfosDict.to_dataset_card_data` for `dataset_info` (features and
split sizes, which `datasets.load_dataset` checks against the files), and `configs` naming each
split's files. The body says how the data was made: model (named, never by a local path), engine,
the decision, sampling, when and with which kit, the license (or that none was given), where each
source came from (Hub commit, or local files and their sha256), sources before and after filtering,
each drop rule with its count, the rules not applied with the rows of `train` that meet them, where
the tools are, and how to load it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData

from kit.artifacts import Decision, Manifest
from kit.export.drops import RULES
from kit.modelshape import DEMO_MARKER
from kit.params import RunParams
from kit.prompts.records import SourceOrigin

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
    origins: dict[str, SourceOrigin] = field(default_factory=dict)
    """Per source, where its rows came from (plan.json's `origins`, kit.prompts.origin)."""
    origins_note: str = ""
    """How the origins were found, where not from the plan (an older plan.json lacks them)."""
    kept_flags: dict[str, int | None] = field(default_factory=dict)
    """Rows in `train` that meet a rule the export did not apply (ExportFacts.kept_flags)."""
    near_found: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per near-duplicate rule, stage 4's clusters over all rows (summary.json's near_duplicates:
    clusters, rows, extra_rows), for the rules whose rows in `train` the export did not count."""
    created: str = ""
    """When the export was made (UTC, ISO 8601)."""
    kit_version: str = ""


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
        return f"config.json sha256 `{hashlib.sha256(config.read_bytes()).hexdigest()}`"
    return "unknown (no config.json beside the model)"


def model_name(params: RunParams | None, engine: dict[str, Any]) -> tuple[str, str]:
    """How the card names the model, never by a local path, and a note on it (or ""): the name it was
    served under, the repo id of a Hub snapshot, the kit's demo model, else the model folder's name."""
    if params is not None and params.model.served_name:
        return params.model.served_name, ""
    path = Path(params.model.path if params is not None else str(engine.get("model") or "unknown"))
    repo = hub_repo(path)
    if repo is not None:
        return repo, ""
    try:
        demo = json.loads((path / DEMO_MARKER).read_text())
    except (OSError, ValueError):
        demo = None
    if isinstance(demo, dict):
        return f"kit demo model v{demo.get('version')}", "a tiny model `kit demo-assets` trains"
    return path.name, ""


def hub_repo(path: Path) -> str | None:
    """The Hub repo id of a folder in the Hub's cache (`.../models--org--name/snapshots/<commit>`)."""
    repo = next((p for p in reversed(path.parts) if p.startswith(("models--", "datasets--"))), None)
    return repo.split("--", 1)[1].replace("--", "/") if repo is not None else None


def public_path(path: str | Path) -> str:
    """A local path as the card may publish it: a Hub cache folder's repo id (and the rest below its
    snapshot), else the file or folder's own name; never where it lies on this machine."""
    p = Path(path)
    repo = hub_repo(p)
    if repo is not None and "snapshots" in p.parts:
        below = p.parts[p.parts.index("snapshots") + 2 :]
        return "/".join((repo, *below))
    return p.name or str(p)


ABSOLUTE = re.compile(r"(?<![\w:/.~])(/[^\s/`'\"()\[\],;]+)+/?")
"""An absolute local path in free text (a URL's `//host/...` is not one: the lookbehind)."""


def no_local_paths(text: str) -> str:
    """`text` with each absolute local path replaced by its public form (`public_path`)."""
    return ABSOLUTE.sub(lambda m: public_path(m.group(0).rstrip("/")), text)


def _model_lines(facts: CardFacts) -> list[str]:
    params, engine = facts.params, facts.engine
    versions = engine.get("versions") or {}
    version = ", ".join(f"{k} {v}" for k, v in versions.items()) if isinstance(versions, dict) else versions
    name, note = model_name(params, engine)
    decision = (
        no_local_paths(facts.decision_text) if facts.decision_text else "not decided (no decision.json)"
    )
    return [
        f"- **Model**: `{name}` ({'; '.join(filter(None, (note, model_revision(params))))})",
        f"- **Engine**: {engine.get('flavor', 'unknown')}"
        + (f" ({version})" if version else "")
        + f"; speculative decoding: {_speculation(engine.get('speculative'))}",
        f"- **Decision** (stage 2): {decision}",
        f"- **Sampling**: {sampling_words(facts.sampling)}",
        f"- **Created**: {_created(facts)}, with {facts.kit_version or 'an unknown kit version'}",
        f"- **License**: {_license_line(facts)}",
    ]


def _speculation(spec: Any) -> str:
    """The speculative settings as `key` value pairs (the draft model by its public name), or off."""
    if not spec:
        return "off"
    if not isinstance(spec, dict):
        return f"`{spec}`"
    shown = {k: public_path(v) if k == "draft_model_path" else v for k, v in spec.items() if v is not None}
    return ", ".join(f"`{k}` {_value(v)}" for k, v in shown.items())


def sampling_words(sampling: dict[str, Any]) -> str:
    """The sampling settings sent with each request, `key` value, the unset ones left out (they were
    not sent: the engine's and the model's defaults applied)."""
    given = {k: v for k, v in sampling.items() if v is not None and v != [] and v != {}}
    if not given:
        return "none recorded"
    shown = ", ".join(f"`{k}` {_value(v)}" for k, v in given.items())
    unset = len(sampling) - len(given)
    return shown + (
        f"; the {unset} setting(s) left unset were not sent (the engine's and the model's defaults)"
        if unset
        else ""
    )


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _created(facts: CardFacts) -> str:
    made = f"exported {facts.created[:16].replace('T', ' ')} UTC" if facts.created else "export date unknown"
    finished = facts.manifest.finished_at if facts.manifest is not None else None
    return made + (f" (the generation finished {finished[:16].replace('T', ' ')} UTC)" if finished else "")


def _license_line(facts: CardFacts) -> str:
    given = facts.params.export.license if facts.params is not None else None
    if given:
        return (
            f"`{given}` (`export.license` in the params), for these generated rows; the sources' "
            "licenses and the model's terms of use still apply to them."
        )
    return (
        "none was given (`export.license` is not set in the params), so the header says `unknown`: "
        "nobody has stated the terms this data may be used under. Check the sources' licenses and "
        "the model's terms of use before sharing it or training on it, then set `export.license` "
        "(a Hub license id: `apache-2.0`, `cc-by-4.0`, `other`...) and export again."
    )


def _origin_lines(facts: CardFacts) -> list[str]:
    lines = [f"- `{name}`: {_origin(o)}" for name, o in sorted(facts.origins.items())]
    if not lines:
        return ["Where the sources came from is unknown (no plan.json and no readable params.yaml).", ""]
    note = f" ({facts.origins_note})" if facts.origins_note else ""
    return [f"Where each source's rows came from{note}:", "", *lines, ""]


def _origin(o: SourceOrigin) -> str:
    """One source's origin in words: the Hub id and its commit, or each local file and its sha256."""
    if "hub" not in o:
        files = [
            f"`{public_path(f['path'])}` (sha256 `{f['sha256']}`)"
            if f.get("sha256")
            else f"`{public_path(f['path'])}` (missing)"
            for f in o.get("files") or []
        ]
        return f"local {o.get('builder', '')} file{'s' if len(files) > 1 else ''} " + ", ".join(files)
    where = f"Hub dataset `{o['hub']}`" + "".join(f", {k} `{o[k]}`" for k in ("config", "split") if o.get(k))
    if o.get("data_files"):
        where += ", data files " + ", ".join(f"`{f}`" for f in o["data_files"])
    rev = o.get("revision")
    return where + (f", revision `{rev}`" if rev else ", revision not recorded (the latest when planned)")


def _kept_table(facts: CardFacts) -> list[str]:
    if not facts.kept_flags:
        return []
    lines = [
        "Rules this export did not apply: the rows of `train` that meet them were kept "
        "(`--drop` adds a rule; docs/export.md):",
        "",
        "| rule | rows kept in `train` | the row |",
        "|---|---:|---|",
    ]
    for rule, n in facts.kept_flags.items():
        lines.append(f"| `{rule}` | {_kept_count(n, facts.near_found.get(rule))} | {RULES[rule]} |")
    return lines


def _kept_count(n: int | None, found: dict[str, int] | None) -> str:
    """A kept-flags cell: the rows of `train`, else what stage 4 found among all rows, else why none."""
    if n is not None:
        return f"{n:,}"
    if found is None:
        return "not looked for (stage 4 made no clusters)"
    extra, clusters = found.get("extra_rows", 0), found.get("clusters", 0)
    return (
        f"not counted in `train`; stage 4 found {clusters:,} cluster(s) among all rows, "
        f"{extra:,} row(s) beyond the first of each"
    )


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
        + ", tool calls in the OpenAI shape in every assistant turn (an earlier turn's `<tool_call>` "
        "text too; a tool turn without its `<tool_response>` wrapper, which the chat template writes), "
        "`tools` as JSON text. The offered tools are in one place, "
        "the `tools` column (`json.loads` it and pass it to the chat template as `tools`, as TRL's "
        "conversational format does); a `<tools>` listing of them in a system prompt was taken out, "
        "so a template renders each schema once"
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
        *_origin_lines(facts),
        "Prompts planned per source (after the plan's filters), rows generated, requests that failed,",
        "and where the rows went:",
        "",
        *_sources_table(facts),
        "",
        "## What was dropped and what was kept",
        "",
        "A row goes to `rejected` under the first of these rules it meets (its `drop_reason` column);",
        "for `duplicate` and `near_duplicate*` one row of each group stays in `train`:",
        "",
        *_reasons_table(facts),
        "",
        *_kept_table(facts),
        *([""] if facts.kept_flags else []),
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
        parts += [f"- {no_local_paths(g)}" for g in facts.gaps]
    return "\n".join(parts) + "\n"


def dataset_card(facts: CardFacts) -> DatasetCard:
    """The whole card, as huggingface_hub reads it."""
    return DatasetCard(f"---\n{card_data(facts).to_yaml()}\n---\n\n{card_body(facts)}")
