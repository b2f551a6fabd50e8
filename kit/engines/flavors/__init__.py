"""The engine flavors, one module each behind one interface (`base.Flavor`), found by name.

    fl = flavor(params.engine.flavor)     # FLAVORS["vllm"], ...
    server_command(params, port)          # fl.command(params, port): its launch argv
    fl.spell_arm(Arm(3, "MTP"))           # {"num_steps": 3} on vLLM; steps, top-k, draft tokens on SGLang
    fl.started, fl.no_speculation, fl.capacity_flag, fl.refused_fields, fl.spec_metrics, ...

What is true of an engine lives in its module; the rest of the kit asks the flavor object and never
compares its name. The registry loads without pydantic (the probe's GPU-box script uses it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.engines import flavor_names
from kit.engines.flavors import external, sglang, transformers, vllm
from kit.engines.flavors.base import Capacity, Flavor
from kit.errors import ParamsError

if TYPE_CHECKING:
    from kit.params import RunParams

FLAVORS: dict[str, Flavor] = {
    f.name: f for f in (transformers.FLAVOR, sglang.FLAVOR, vllm.FLAVOR, external.FLAVOR)
}
"""Every flavor by name, the default (`transformers`) first: `engine.flavor` takes these names."""


def _names_agree() -> None:
    """The params read the flavors' names and two of their facts from kit/engines/flavor_names.py (no
    circle through the registry): refuse to load when that file and the flavors' modules disagree."""
    here = (
        tuple(FLAVORS),
        frozenset(n for n, f in FLAVORS.items() if not f.started),
        {n: f.kv_cap_flag for n, f in FLAVORS.items() if f.kv_cap_flag},
        {n: tuple(f.backend_settings) for n, f in FLAVORS.items()},
    )
    there = (
        flavor_names.FLAVOR_NAMES,
        flavor_names.NOT_STARTED,
        flavor_names.KV_CAP_FLAGS,
        flavor_names.BACKEND_SETTINGS,
    )
    if here != there:
        raise RuntimeError(
            "kit/engines/flavor_names.py disagrees with the flavors' modules: it says (names, not started, "
            f"KV cap flags, backend settings) {there}, the flavors {here}; change it to match"
        )


_names_agree()

__all__ = ["FLAVORS", "Capacity", "Flavor", "flavor", "server_command", "server_env"]


def flavor(name: str) -> Flavor:
    """The flavor called `name`; a ParamsError naming the known ones otherwise."""
    found = FLAVORS.get(name)
    if found is None:
        raise ParamsError(f"unknown engine flavor {name!r}; known: {', '.join(FLAVORS)}")
    return found


def server_command(params: RunParams, port: int) -> list[str]:
    """The argv that starts the server of `params.engine.flavor` on `port`."""
    return flavor(params.engine.flavor).command(params, port)


def server_env(params: RunParams) -> dict[str, str]:
    """Environment variables to add to the current environment for the server process: the
    flavor's own, then `engine.env` (which wins)."""
    eng = params.engine
    return {**flavor(eng.flavor).env(eng), **eng.env}
