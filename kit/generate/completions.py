"""What counts as a real completion: a row is stored only when the engine's answer is one.

An HTTP 200 is not enough. Engines answer 200 with no `choices`, with empty content and a null
`finish_reason`, or with SGLang's `abort` (a request the scheduler dropped); such an answer is
retried like a transient fault, then recorded in `failures.jsonl` if it persists.
"""

from __future__ import annotations

from typing import Any

FINISHED = frozenset({"stop", "length", "tool_calls"})
"""finish_reason values of a completion that ran to its end (EOS or stop string, max_tokens, a tool call)."""


def not_a_completion(result: Any) -> str | None:
    """Why `result` (a ChatResult) is not a real completion; None when it is one.

    A real completion has a finished `finish_reason` and something generated: content, tool calls,
    or reasoning the engine's parser split out of the content.
    """
    reason = result.finish_reason
    if not isinstance(reason, str) or reason not in FINISHED:
        shown = "missing (no choices?)" if reason is None else repr(reason)
        return f"the answer is not a finished completion: finish_reason {shown}"
    if not (result.text or result.tool_calls or getattr(result, "reasoning", None)):
        return f"the answer is empty: no content and no tool calls (finish_reason {reason!r})"
    return None
