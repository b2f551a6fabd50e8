"""A server someone else runs at `engine.base_url`: the kit neither starts, restarts nor tunes it, and
checks none of its environment. It may be an SGLang (then `/server_info` says its capacity) or
any OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kit.engines.flavors.base import Capacity, Flavor

if TYPE_CHECKING:
    from kit.params import EngineParams


@dataclass(frozen=True, eq=False)
class External(Flavor):
    def capacity(
        self, eng: EngineParams, *, distribution: str | None, gpus: Callable[[], list[Any]]
    ) -> Capacity:
        return Capacity(None, "the external server does not say how many requests it runs at once")


FLAVOR = External(
    name="external",
    title="the external server",
    started=False,
    no_speculation="the kit does not control an external server's launch flags",
    server_info=True,
)
