"""Stage 3: plan the prompts, then generate every completion exactly once.

kit generate params/demo.yaml                # plan (if needed), generate, resume where it stopped
kit generate params/demo.yaml --shard 0/4    # one static shard of four (SLURM-style); merge by id
kit generate params/demo.yaml --fresh        # archive earlier outputs of this run and start anew
"""

from typing import Any

__all__ = ["run_generation"]


def __getattr__(name: str) -> Any:
    """`run_generation` is imported on first use: importing a submodule (the lock, the store) stays light."""
    if name == "run_generation":
        from kit.generate.run import run_generation

        return run_generation
    raise AttributeError(f"module 'kit.generate' has no attribute {name!r}")
