"""Inference engines: command lines, server processes that never outlive the kit, one async client.

from kit.engines import start_server, EngineClient
with start_server(params, run_dir / "logs") as srv:
    async with EngineClient(srv.base_url, params.engine.flavor) as c:
        result = await c.chat([{"role": "user", "content": "hi"}], max_tokens=16)
"""

from kit.engines.client import ChatResult, EngineClient, RequestRejected, TransientEngineError
from kit.engines.commands import adapt_flags, flavor, server_command, server_env
from kit.engines.process import ExternalServer, ServerProcess, start_server

__all__ = [
    "ChatResult",
    "EngineClient",
    "ExternalServer",
    "RequestRejected",
    "ServerProcess",
    "TransientEngineError",
    "adapt_flags",
    "flavor",
    "server_command",
    "server_env",
    "start_server",
]
