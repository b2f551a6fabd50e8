"""A row's own sampling settings (an OpenAI batch line's `body`), sent over `generate.sampling`.

    rows = RowSampling(params)                     # in the loop (build_loop)
    fields, s = rows.resolve(item["sampling"])     # the request's fields and its merged settings
    check_row_sampling(prompts, params, problems)  # before any request: what the engine refuses

A batch line's sampling (kit.prompts.openai_batch.line_sampling: `temperature`, `top_p`,
`max_tokens`, `seed`, `stop`, ...) is kept in its prompt's metadata as `body_sampling`; a work item
carries it as JSON (`item["sampling"]`, None for a row without), and the loop sends
`generate.sampling` with the line's fields put over it: its `max_tokens` over the source's, its `seed`
as the base of its samples' seeds. The row records the merged settings (`sampling`, and their hash
in `sampling_hash`). The settings a flavor refuses (`Flavor.sampling_problems`) are refused before
the first request, the file and line named. The run's identity holds the hash of each batch file
(`batch_files`, kit.prompts.prompt_set.batch_file_digests): a resume over changed lines is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.engines import parsers
from kit.engines.flavors import flavor
from kit.engines.request_fields import _generation_config, request_fields
from kit.errors import DataError
from kit.params import GenerateParams, RunParams, SamplingParams
from kit.prompts.records import LineSampling

KEY = "body_sampling"
PER_REQUEST = ("seed", "max_tokens")
"""Fields the loop sets per request, not part of the cached body fields."""


def item_sampling(metadata: str | None) -> str | None:
    """A prompt's own sampling settings as sorted JSON (a work item's `sampling`), or None."""
    if not metadata or KEY not in metadata:
        return None
    own = json.loads(metadata).get(KEY)
    return json.dumps(own, sort_keys=True) if own else None


def merged(base: SamplingParams, own: LineSampling) -> SamplingParams:
    """`base` with a row's own fields put over it (checked again: the line's values were)."""
    return SamplingParams.model_validate({**base.model_dump(), **own})


def identity(s: SamplingParams) -> tuple[str, str]:
    """(JSON of the settings, its short hash), as `sampling_identity` writes the run's."""
    text = json.dumps(s.model_dump(mode="json"), sort_keys=True)
    return text, hashlib.sha256(text.encode()).hexdigest()[:16]


def sampling_identity(params: GenerateParams) -> tuple[str, str]:
    """(JSON of the run's sampling settings, its short hash): rows from different settings never mix
    (a row with its own settings records `identity` of the merged ones). kit.generate.loop imports it."""
    return identity(params.sampling)


class RowSampling:
    """The request fields of rows with their own sampling, built once per distinct setting (the seed
    and max_tokens are per request, so lines that differ only in their seed share one entry)."""

    def __init__(self, params: RunParams) -> None:
        self.base = params.generate.sampling
        model = Path(params.model.path)
        self._flavor = flavor(params.engine.flavor)
        self._switch = parsers.thinking_switch(parsers.chat_template(model)) or "enable_thinking"
        self._config = _generation_config(model)
        self._fields: dict[str, dict[str, Any]] = {}

    def resolve(self, own_json: str) -> tuple[dict[str, Any], SamplingParams]:
        """(body fields without seed, the merged settings) of a row whose own settings are `own_json`."""
        own = json.loads(own_json)
        s = merged(self.base, own)
        key = json.dumps({k: v for k, v in own.items() if k not in PER_REQUEST}, sort_keys=True)
        fields = self._fields.get(key)
        if fields is None:
            fields = request_fields(
                self._flavor, s, thinking_kwarg=self._switch, model_generation_config=self._config
            )
            fields.pop("seed", None)
            self._fields[key] = fields
        return fields, s


def check_row_sampling(
    prompts: Path, params: RunParams, problems: Callable[[SamplingParams], list[str]]
) -> None:
    """Refuse, before any request, rows whose own sampling the engine would reject: `DataError`
    naming, for each distinct setting refused, the first line that asks for it."""
    batch = {s.name for s in params.data.sources if s.adapter == "openai_batch"}
    if not batch:
        return
    found: list[str] = []
    seen: set[str] = set()
    file = pq.ParquetFile(prompts)
    for part in file.iter_batches(columns=["source", "metadata"], batch_size=65536):
        mine = pc.is_in(part.column("source"), value_set=pa.array(sorted(batch)))
        for meta in part.column("metadata").filter(mine).to_pylist():
            own = item_sampling(meta)
            if own is None or own in seen:
                continue
            seen.add(own)
            said = problems(merged(params.generate.sampling, json.loads(own)))
            if said:
                where = json.loads(meta).get("line") or "a line"
                why = "; ".join(p.replace("generate.sampling.", "body.", 1) for p in said)
                found.append(f"{where}: {why}")
    if found:
        raise DataError(
            f"the {params.engine.flavor} engine would refuse the sampling settings of these batch lines "
            "(the first line of each setting):\n  - "
            + "\n  - ".join(found[:20])
            + ("\n  ..." if len(found) > 20 else "")
            + "\nTo fix: change those lines' body, or the engine; nothing was sent."
        )
