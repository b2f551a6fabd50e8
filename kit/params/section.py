"""The base of every params section: unknown keys are errors, values are frozen once read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A params section (`model`, `engine`, `decide`, ...): a key it does not declare is an error
    naming the key (kit.params.load says which are allowed), and its values are frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)
