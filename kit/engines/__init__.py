"""Inference engines: one module per flavor (`flavors/`), server processes that never outlive the kit,
one async client.

from kit.engines import start_server, EngineClient
with start_server(params, run_dir / "logs") as srv:
    async with EngineClient(srv.base_url, params.engine.flavor) as c:
        result = await c.chat([{"role": "user", "content": "hi"}], max_tokens=16)

Names are imported on first use, so light modules (`launcher`, `parsers`) load without the HTTP
client or pydantic: the probe's GPU-box script (benchmarks/probe_gpu.py) runs without them.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ChatResult": "client",
    "EngineClient": "client",
    "RequestRejected": "client",
    "TransientEngineError": "client",
    "FLAVORS": "flavors",
    "Flavor": "flavors",
    "flavor": "flavors",
    "server_command": "flavors",
    "server_env": "flavors",
    "adapt_flags": "launcher",
    "ExternalServer": "servers",
    "all_started": "servers",
    "ServerProcess": "process",
    "start_server": "servers",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kit.engines' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kit.engines.{_WHERE[name]}"), name)
