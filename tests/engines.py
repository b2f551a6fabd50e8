"""Where the real engine environments live (built by `make engine-vllm` / `make engine-sglang`).

A test that needs one is skipped with the make target to run when it is absent, unless
KIT_REQUIRE_ENGINES=1 (set by `make test`, so CI runs them), where the absence is a failure.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"


def engine_python(python: Path, target: str) -> Path:
    """`python` when the engine environment is built; else skip (or fail under KIT_REQUIRE_ENGINES)."""
    if (python.parent.parent / ".ready").is_file():
        return python
    message = f"{python.parent.parent.name} is not built: run `make {target}`"
    if os.environ.get("KIT_REQUIRE_ENGINES") == "1":
        pytest.fail(message)
    pytest.skip(message)


SHARED_VLLM_KEY = "kit-test-" + secrets.token_hex(12)
"""The API key the shared vLLM server wants (vLLM guards /v1/*; /health and /metrics stay open)."""


def vllm_engine(**over: object) -> dict:
    """The `engine` section of a plain-decoding vLLM (CPU build) on the demo model, parsers from its
    chat template (hermes, qwen3): the shared server's, and that of params/demo-vllm.yaml as the
    tests shrink it with `speculative: {}` (the same command line)."""
    return {
        "flavor": "vllm",
        "python": str(engine_python(VLLM_PYTHON, "engine-vllm")),
        "context_length": 2048,
        "startup_timeout_s": 600,
        # not compiling the model graph starts the server ~40 s sooner here; the numbers are not the point
        "extra_args": ["--dtype", "float32", "--enforce-eager"],
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        **over,
    }


class SharedVllm:
    """One real vLLM server for the session's tests that only need one running (issue 33): plain
    decoding, the parsers the chat template calls for, an API key (SHARED_VLLM_KEY, given through
    VLLM_API_KEY, so no command line holds it). Started by the first test that asks (`ready()`),
    stopped after the last one in a row that uses it (conftest moves them next to each other: idle,
    vLLM's CPU build spins and would take a core from the tests that time the machine), and started
    again should a later test ask. Each test makes its own run folder; the log is the server's."""

    name = "shared-vllm"

    def __init__(self, demo_model: Path, log_dir: Path) -> None:
        from kit.params import RunParams

        self.params = RunParams.model_validate(
            {"run": self.name, "model": {"path": str(demo_model)}, "engine": vllm_engine()}
        )
        self.log_dir = log_dir
        self.api_key = SHARED_VLLM_KEY
        self.starts = 0
        self._server = None

    def launch(self) -> None:
        """Start it (if it is not running) without waiting: `ready()` waits."""
        from kit.engines import start_server

        if self._server is not None and self._server.alive():
            return
        self._server = start_server(self.params, self.log_dir, name=f"{self.name}-{self.starts}")
        before = os.environ.get("VLLM_API_KEY")
        os.environ["VLLM_API_KEY"] = self.api_key  # the server inherits it at launch
        try:
            self._server.start()
        finally:
            if before is None:
                del os.environ["VLLM_API_KEY"]
            else:
                os.environ["VLLM_API_KEY"] = before
        self.starts += 1

    def ready(self):
        """The running server (a kit ServerProcess), started first if need be."""
        self.launch()
        try:
            return self._server.wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def log_path(self) -> Path:
        """The log of the server now running (each start has its own)."""
        return self.ready().log_path

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
