"""Profiler: a real random-weight model timed on the CPU, scaling to full depth, calibration."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from kit.arch import arch_from_config
from kit.decide.costmodel import Hardware, Scenario, step_time
from kit.decide.profile.profiler import (
    PROFILE_COLUMNS,
    ProfileGrid,
    calibrate,
    check_profile,
    config_hash,
    load_profile,
    profile_steps,
)
from kit.demo.model import MODEL_SHAPE
from kit.errors import CostModelError

DEMO = dict(model_type="qwen3", vocab_size=2048, **MODEL_SHAPE)
CPU = Hardware(bandwidth_Bps=20e9, flops_bf16=200e9, memory_bytes=8e9, name="cpu")


@pytest.fixture(scope="module")
def demo_profile() -> pd.DataFrame:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        grid = ProfileGrid(batch_sizes=(1, 8), q_values=(1, 4), contexts=(32, 256), reps=5)
        return profile_steps(DEMO, grid)
    finally:
        torch.set_num_threads(threads)


def test_profile_table_has_contract_columns(demo_profile: pd.DataFrame, tmp_path) -> None:
    assert set(PROFILE_COLUMNS) <= set(demo_profile.columns)
    assert len(demo_profile) == 8 and (demo_profile.step_s > 0).all()
    assert set(demo_profile.device) == {"cpu"} and not demo_profile.cuda_graph.any()
    assert set(demo_profile.config_hash) == {config_hash(arch_from_config(DEMO))}
    path = tmp_path / "profile.parquet"
    demo_profile.to_parquet(path)
    assert load_profile(path).equals(demo_profile)


def test_calibrated_model_tracks_the_profile(demo_profile: pd.DataFrame) -> None:
    arch = arch_from_config(DEMO)
    eff = calibrate(demo_profile, arch, CPU)
    assert eff.source == "profile on cpu"
    preds = [step_time(Scenario(arch, CPU, eff), r.B, r.q, r.L) for r in demo_profile.itertuples()]
    errors = [abs(p / m - 1) for p, m in zip(preds, demo_profile.step_s, strict=True)]
    assert sorted(errors)[len(errors) // 2] < 0.5


def test_profile_of_another_model_is_rejected(demo_profile: pd.DataFrame) -> None:
    other = arch_from_config({**DEMO, "hidden_size": 256})
    with pytest.raises(CostModelError, match="not this model"):
        check_profile(demo_profile, other)
    with pytest.raises(CostModelError, match="not this model"):
        calibrate(demo_profile, other, CPU)


def test_few_layers_scale_to_full_depth() -> None:
    deep = {**DEMO, "num_hidden_layers": 8}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        grid = ProfileGrid(batch_sizes=(2,), q_values=(1,), contexts=(16,), reps=2)
        table = profile_steps(deep, grid, n_layers=4)
    finally:
        torch.set_num_threads(threads)
    row = table.iloc[0]
    assert (row.n_layers_profiled, row.n_layers_full) == (4, 8)
    assert row.step_s >= row.step_s_profiled * 0.9
    assert row.config_hash == config_hash(arch_from_config(deep))
    with pytest.raises(CostModelError, match="at least 2 layers"):
        profile_steps(deep, ProfileGrid(batch_sizes=(1,), q_values=(1,), contexts=(8,)), n_layers=1)


def test_not_a_profile_file(tmp_path) -> None:
    path = tmp_path / "x.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(path)
    with pytest.raises(CostModelError, match="not a step profile"):
        load_profile(path)
