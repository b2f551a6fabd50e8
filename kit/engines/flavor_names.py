"""The engine flavors' names, and the two facts of a flavor that checking a params file needs, in a
module that imports nothing: kit/params/engine.py (`engine.flavor`'s allowed values, two checks),
run_params.py and paths.py read them here without loading the flavor registry (kit/engines/flavors/),
whose modules name the params' types in their annotations. Each flavor's module stays the home of
what is true of it: the registry checks at import that its flavors agree with this file.
"""

from __future__ import annotations

FLAVOR_NAMES: tuple[str, ...] = ("transformers", "sglang", "vllm", "external")
"""One per module of kit/engines/flavors/, in the registry's order: the default (`transformers`) first."""
NOT_STARTED: frozenset[str] = frozenset({"external"})
"""Flavors whose server the kit does not start (`Flavor.started` false): engine.base_url names it."""
KV_CAP_FLAGS: dict[str, str] = {"sglang": "--max-total-tokens"}
"""`Flavor.kv_cap_flag` of each flavor that has one."""
BACKEND_SETTINGS: dict[str, tuple[str, ...]] = {
    "transformers": ("attention_backend",),
    "sglang": ("attention_backend", "sampling_backend"),
    "vllm": ("attention_backend",),
    "external": (),
}
"""The engine settings each flavor can spell (`Flavor.backend_settings`'s keys): what `decide.backends`
may measure and `engine.sampling_backend` may set."""
