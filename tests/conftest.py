"""Shared fixtures: the embedded demo model (built once per machine), params files in tmp."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / ".cache" / "demo" / "model"
SOURCES = ["infinity_instruct", "webinstructsub", "codefeedback", "metamathqa", "hermes_fc", "agentinstruct"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def demo_model() -> Path:
    from kit.demo.model import ensure_demo_model

    return ensure_demo_model(DEMO_MODEL, quiet=True)


@pytest.fixture(scope="session")
def fixture_data(tmp_path_factory) -> Path:
    from kit.demo.fixtures import write_fixtures

    out = tmp_path_factory.mktemp("fixture-data")
    write_fixtures(out)
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def write_params(tmp_path, demo_model, fixture_data):
    """Write a params file for a small run over the demo model and fixture data; returns its path."""

    def make(name: str = "t", counts: dict[str, int] | None = None, **sections) -> Path:
        counts = counts or {s: 4 for s in SOURCES}
        base = {
            "run": name,
            "output_dir": str(tmp_path / "outputs"),
            "model": {"path": str(demo_model)},
            "engine": {"flavor": "transformers", "startup_timeout_s": 300},
            # levels of half a second: the tests check what is measured, not how well
            "decide": {
                "concurrencies": [1, 4],
                "num_prompts": 4,
                "max_tokens": 8,
                "spec_steps": [2],
                "level_s": 0.5,
            },
            "data": {
                "seed": 0,
                "sources": [
                    {
                        "name": s,
                        "adapter": s,
                        "dataset": "json",
                        "data_files": [str(fixture_data / f"{s}.jsonl")],
                        "count": n,
                    }
                    for s, n in counts.items()
                ],
            },
            "generate": {
                "sampling": {"max_tokens": 16, "temperature": 0.7, "seed": 0},
                "concurrency": 8,
                "shard_rows": 4,
                "shard_seconds": 5,
                "request_timeout_s": 120,
            },
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(_merge(base, sections)))
        return path

    return make
