"""Prompts: dataset adapters (a registry by name), the seeded prompt plan and the frozen prompt set.

from kit.prompts import adapter_names, get_adapter
from kit.prompts.plan import build_plan, read_prompts
"""

from kit.prompts import sources as _sources  # noqa: F401  (fills the adapter registry)
from kit.prompts.adapters import Adapted, Adapter, PromptRow, adapter, adapter_names, get_adapter

__all__ = ["Adapted", "Adapter", "PromptRow", "adapter", "adapter_names", "get_adapter"]
