"""Synthetic (engine-shaped) step profiler: real tensors timed on the CPU, memory refusal, the script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from kit.arch import arch_from_config
from kit.decide.profile import synthetic_step as syn
from kit.decide.profile.profiler import PROFILE_COLUMNS, ProfileGrid, config_hash, load_profile, profile_steps
from kit.errors import CostModelError

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(
    model_type="qwen3",
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=4096,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _reference_attention(
    m: syn.SyntheticModel, p: syn.LayerWeights, x: torch.Tensor, kc, vc, B: int, q: int, L: int
):
    """Plain GQA attention: expanded KV heads, every new token over all L + q positions (the profiler
    leaves the q x q causal triangle out: it does not change the step's time)."""
    a = m.arch
    nq, nkv, d = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.head_dim
    gate_w = nq if a.attn_output_gate else 0
    qh, gate, k, v = torch.nn.functional.linear(x, p.w_in).split([nq, gate_w, nkv, nkv], dim=-1)
    keys = torch.cat([kc[:, :, :L], k.view(B, q, -1, d).transpose(1, 2)], dim=2)
    vals = torch.cat([vc[:, :, :L], v.view(B, q, -1, d).transpose(1, 2)], dim=2)
    group = a.num_heads // a.num_kv_heads
    keys, vals = keys.repeat_interleave(group, 1), vals.repeat_interleave(group, 1)
    o = torch.nn.functional.scaled_dot_product_attention(qh.view(B, q, -1, d).transpose(1, 2), keys, vals)
    o = o.transpose(1, 2).reshape(B * q, nq)
    return torch.nn.functional.linear(o * gate.sigmoid() if gate_w else o, p.w_out)


@pytest.mark.parametrize(
    ("q", "gated", "kv_heads"), [(1, False, 2), (3, False, 2), (3, True, 4), (2, False, 8)]
)
def test_packed_attention_matches_plain_gqa(q: int, gated: bool, kv_heads: int) -> None:
    """Packing the query heads by KV group gives what expanded K/V heads give."""
    arch = arch_from_config({**TINY, "attn_output_gate": gated, "num_key_value_heads": kv_heads})
    m = syn.build_synthetic(arch, 1, "cpu", torch.float32)
    B, L = 3, 10
    syn.allocate(m, B, L + q)
    kc, vc = m.buffers["k"][0].clone(), m.buffers["v"][0].clone()
    x = torch.randn(B * q, arch.hidden_size)
    got = syn._attention(m, m.layers[0], x, 0, B, q, L)
    want = _reference_attention(m, m.layers[0], x, kc, vc, B, q, L)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.equal(m.buffers["k"][0][:, :, L : L + q], kc[:, :, L : L + q])  # new K written in place


def test_step_time_grows_with_context_and_batch() -> None:
    grid = ProfileGrid(batch_sizes=(1, 32), q_values=(1,), contexts=(64, 4096), reps=3)
    t = profile_steps(TINY, grid, backend="synthetic").set_index(["B", "L"]).step_s
    assert t[(32, 4096)] > 1.5 * t[(32, 64)]
    assert t[(32, 4096)] > 1.5 * t[(1, 4096)]


def test_profile_has_contract_columns_and_q_above_one(tmp_path: Path) -> None:
    grid = ProfileGrid(batch_sizes=(2,), q_values=(1, 2, 4), contexts=(16,), reps=2)
    table = profile_steps({**TINY, "num_hidden_layers": 8}, grid, n_layers=4, backend="synthetic")
    assert set(PROFILE_COLUMNS) <= set(table.columns) and len(table) == 3
    assert set(table.backend) == {"synthetic"} and (table.step_s > 0).all() and not table.cuda_graph.any()
    assert set(table.q) == {1, 2, 4} and set(table.dtype_bytes) == {4}
    assert (table.n_layers_profiled == 4).all() and (table.n_layers_full == 8).all()
    assert set(table.config_hash) == {config_hash(arch_from_config({**TINY, "num_hidden_layers": 8}))}
    table.to_parquet(tmp_path / "p.parquet")
    assert load_profile(tmp_path / "p.parquet").equals(table)


def _shrunk_hybrid() -> dict:
    cfg = json.loads((ROOT / "tests/configs/qwen3_6_27b.json").read_text())
    cfg["text_config"].update(
        hidden_size=128,
        intermediate_size=384,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=2048,
        linear_num_value_heads=4,
        linear_num_key_heads=2,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
    )
    return cfg


def test_hybrid_model_runs_and_scales_to_full_depth() -> None:
    cfg = _shrunk_hybrid()
    arch = arch_from_config(cfg)
    assert arch.is_hybrid and arch.attn_output_gate
    m = syn.build_synthetic(arch, 8, "cpu", torch.float32)
    syn.allocate(m, 2, 8 + 2)
    before = m.buffers["state"][0].clone()
    logits = syn.decode_step(m, torch.randn(4, 128), 2, 2, 8, 8)
    assert logits.shape == (4, 2048) and torch.isfinite(logits).all()
    assert not torch.equal(before, m.buffers["state"][0])  # the recurrent state is read and written
    grid = ProfileGrid(batch_sizes=(1, 2), q_values=(1, 2), contexts=(8,), reps=2)
    table = profile_steps(cfg, grid, n_layers=8, backend="synthetic")
    assert (table.n_layers_full == 64).all() and (table.step_s >= table.step_s_profiled).all()


def test_grid_point_over_the_memory_budget_is_refused() -> None:
    grid = ProfileGrid(batch_sizes=(1, 64), q_values=(1, 4), contexts=(1024,), reps=1)
    arch = arch_from_config(TINY)
    need = sum(syn.point_bytes(arch, 4, 64, 4, 1024, 4).values())
    with pytest.raises(CostModelError, match=r"B=64 q=4 L=1024: .* GiB \(kv") as err:
        syn.profile_synthetic(TINY, grid, memory_budget_bytes=need - 1)
    assert "B=1 " not in str(err.value)
    huge = ProfileGrid(batch_sizes=(4096,), q_values=(1,), contexts=(131072,), reps=1)
    with pytest.raises(CostModelError, match="exceed the memory budget of 4.00 GiB"):
        profile_steps(TINY, huge, backend="synthetic")


def test_unsupported_inputs_are_refused() -> None:
    deepseek = json.loads((ROOT / "tests/configs/deepseek_v3.json").read_text())
    grid = ProfileGrid(batch_sizes=(1,), q_values=(1,), contexts=(8,), reps=1)
    with pytest.raises(CostModelError, match="MLA"):
        profile_steps(deepseek, grid, n_layers=4, backend="synthetic")
    with pytest.raises(CostModelError, match="unknown profiler backend"):
        profile_steps(TINY, grid, backend="vllm")


@pytest.mark.slow
def test_benchmark_script_runs_without_pydantic_or_transformers(tmp_path: Path) -> None:
    block = tmp_path / "block"
    block.mkdir()
    for mod in ("pydantic", "typer", "transformers"):
        (block / f"{mod}.py").write_text("raise ImportError('not on the GPU box')\n")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks/profile_step.py"),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--config",
        str(ROOT / "tests/configs/qwen3_32b.json"),
        "--layers",
        "4",
        "--batch-sizes",
        "1,8",
        "--q",
        "1,2",
        "--contexts",
        "32,256",
        "--hidden-override",
        "128",
        "--reps",
        "2",
    ]
    env = {"PYTHONPATH": str(block), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    profile = load_profile(out / "profile.parquet")
    assert len(profile) == 8 and set(profile.backend) == {"synthetic"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "synthetic" and summary["ratio_step_to_bound"] > 0
    assert (summary["largest"]["B"], summary["largest"]["L"]) == (8, 256)
    md = (out / "summary.md").read_text()
    assert "backend: **synthetic**" in md and "x** the bandwidth bound" in md and "x** its bytes bound" in md
    assert isinstance(pd.read_parquet(out / "profile.parquet"), pd.DataFrame)
