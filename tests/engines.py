"""Where the real engine environments live (built by `make engine-vllm` / `make engine-sglang`).

A test that needs one is skipped with the make target to run when it is absent, unless
KIT_REQUIRE_ENGINES=1 (set by `make test`, so CI runs them), where the absence is a failure.
"""

from __future__ import annotations

import os
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
