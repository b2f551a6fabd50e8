"""OpenAI batch files as a source: each line `{custom_id, method, url, body}` becomes one prompt.

    data:
      sources:
        - {name: batch, adapter: openai_batch, dataset: text, data_files: [requests.jsonl]}

The file is read as lines (`dataset: text`), so a line that is not JSON, or not a chat-completion
request the kit can send, is dropped as `malformed` with its line number (plan.json names the first
few) and every other line is kept; `kit export --format openai_batch` answers it with an `error`
line. A line's `custom_id` is its row's id (the prompt id, the generation row's `id` and the output's
`custom_id`; also `source_row_id`): two lines of one file with the same `custom_id` stop the plan,
both named. Its `body` gives the messages and tools, and its sampling settings (`temperature`,
`max_tokens`, `seed`, `stop`, ...), kept in the row's metadata (`body_sampling`), which stage 3 sends
for that row over `generate.sampling` (kit.generate.rowsampling). What the kit cannot give a line is
refused with the file and line named: a method other than POST, another endpoint, `n` > 1,
streaming, logprobs, a response format, content that is not text, a body field it does not know, a
sampling value out of range (the ranges of `generate.sampling`); what the run's engine would refuse
(a flavor's refused fields) is refused by stage 3 before any request, the line named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from pydantic import ValidationError

from kit.errors import DataError
from kit.params import SamplingParams
from kit.prompts.adapters import ROLES, Adapted, _short, adapter, tools_json
from kit.prompts.records import BatchBody, BatchRequest, LineSampling, PromptMessage

ENDPOINTS = ("/v1/chat/completions", "/chat/completions")
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "max_tokens",
    "max_completion_tokens",
)
"""Body fields kept as the line's sampling settings."""
REFUSED = {
    "stream": "streaming: a batch line gets one answer",
    "logprobs": "logprobs: the kit's rows do not keep them",
    "top_logprobs": "logprobs: the kit's rows do not keep them",
    "response_format": "a response format: the kit sends none",
    "audio": "audio output",
    "modalities": "output modalities other than text",
    "n": "n > 1: send one line per sample (or set generate.sampling.n for every line)",
}
"""Body fields a line may not set (beyond their neutral values), with why."""
NEUTRAL = {"stream": (False, None), "logprobs": (False, None), "n": (1, None), "modalities": (["text"], None)}
IGNORED = ("model", "user", "metadata", "store", "tool_choice", "parallel_tool_calls")
"""Body fields read and left aside (the run's model and tool settings apply)."""
KNOWN = frozenset({"messages", "tools", *SAMPLING_FIELDS, *REFUSED, *IGNORED})


@adapter("openai_batch", columns=("text",), lines=True, own_ids=True)
def openai_batch(row: Mapping[str, Any]) -> Adapted:
    """OpenAI batch input (.jsonl, read with `dataset: text`): `custom_id`, `method`, `url`, `body`."""
    line = parse_line(row["text"])
    body = line["body"]
    messages = [_message(m) for m in body["messages"]]
    if not any(m["role"] == "user" for m in messages):
        raise DataError("body.messages holds no user message")
    sampling = line_sampling(body)
    meta = {"custom_id": line["custom_id"], "body_sampling": sampling}
    meta.update({f"body_{k}": body[k] for k in IGNORED if k in body and isinstance(body[k], str)})
    return Adapted(messages, tools_json(body.get("tools")), meta, row_id=line["custom_id"])


def parse_line(text: Any) -> BatchRequest:
    """One line of a batch file, checked: a JSON object with a custom_id, POST, a chat endpoint and a body."""
    if not isinstance(text, str) or not text.strip():
        raise DataError("empty line (a batch file holds one JSON request per line)")
    try:
        line = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON ({e.msg} at column {e.colno}): {_short(text, 80)}") from None
    if not isinstance(line, dict):
        raise DataError(f"a JSON {type(line).__name__}, not a request object")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise DataError("no custom_id (every batch request needs a unique text custom_id)")
    if str(line.get("method", "POST")).upper() != "POST":
        raise DataError(f"custom_id {custom_id!r}: method {line.get('method')!r}: only POST is sent")
    if line.get("url", ENDPOINTS[0]) not in ENDPOINTS:
        raise DataError(
            f"custom_id {custom_id!r}: url {line.get('url')!r}: the kit sends chat completions only "
            f"({ENDPOINTS[0]})"
        )
    body = line.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise DataError(f"custom_id {custom_id!r}: body has no messages list")
    for key, why in REFUSED.items():
        if key in body and body[key] not in NEUTRAL.get(key, (None,)):
            value = _short(body[key], 40)
            raise DataError(f"custom_id {custom_id!r}: body.{key} = {value}: the kit cannot give {why}")
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise DataError(
            f"custom_id {custom_id!r}: body.{unknown[0]}: not a field the kit sends (it takes messages, "
            f"tools and {', '.join(SAMPLING_FIELDS)}); remove it"
        )
    return line


def line_sampling(body: BatchBody) -> LineSampling:
    """The body's sampling settings in `generate.sampling`'s terms (`max_completion_tokens` as
    `max_tokens`, a `stop` string as a list), checked against its ranges; `DataError` naming the
    field otherwise."""
    out = {k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None}
    if "max_completion_tokens" in out:
        limit = out.pop("max_completion_tokens")
        if out.setdefault("max_tokens", limit) != limit:
            raise DataError(
                f"body.max_tokens = {out['max_tokens']} and body.max_completion_tokens = {limit} differ: "
                "keep one"
            )
    if isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
    try:
        checked = SamplingParams.model_validate(out)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"][:1]) or "?"
        value = _short(out.get(key), 40)
        raise DataError(
            f"body.{key} = {value}: {err['msg'].lower()} (the ranges of generate.sampling)"
        ) from None
    return cast(LineSampling, {k: getattr(checked, k) for k in out})  # as validated: a seed of "7" is 7


def _message(m: Any) -> PromptMessage:
    if not isinstance(m, Mapping) or m.get("role") not in ROLES:
        raise DataError(f"a message needs a role of {', '.join(sorted(ROLES))}, found {_short(m)}")
    content = m.get("content")
    if isinstance(content, list):  # content parts: text only
        kinds = {p.get("type") for p in content if isinstance(p, Mapping)}
        if kinds - {"text"} or len(kinds) != 1:
            raise DataError(f"content parts of type {sorted(map(str, kinds))}: the kit sends text only")
        content = "".join(str(p.get("text") or "") for p in content)
    if content is None and m.get("role") == "assistant":
        content = ""
    if not isinstance(content, str):
        raise DataError(f"message content must be text, found {_short(content)}")
    return {"role": str(m["role"]), "content": content}
