"""Fabricated model directories: real config.json, index and safetensors files over tiny tensors.

Only tensor names and the index layout matter to the probe; shapes are tiny so a 64-layer model
directory is a few hundred KB and writes in well under a second.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

CONFIGS = Path(__file__).parent / "configs"
SHAPE = (4, 8)


@dataclass(frozen=True)
class FakeModel:
    path: Path
    shapes: dict[str, tuple[int, ...]]
    """Every tensor written to disk, name -> shape."""
    mtp_names: tuple[str, ...]

    @property
    def main_params(self) -> int:
        return sum(prod(s) for n, s in self.shapes.items() if n not in self.mtp_names)

    @property
    def mtp_params(self) -> int:
        return sum(prod(self.shapes[n]) for n in self.mtp_names)


def load_config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / name).read_text())


def _layer_names(prefix: str, i: int, kind: str) -> list[str]:
    mixer = (
        ["self_attn.q_proj", "self_attn.k_proj", "self_attn.o_proj"]
        if kind == "full"
        else ["linear_attn.in_proj_qkvz", "linear_attn.out_proj"]
    )
    return [f"{prefix}.layers.{i}.{m}.weight" for m in [*mixer, "mlp.down_proj"]]


def _write_shards(path: Path, names: list[str], shards: int, dtype: torch.dtype) -> dict[str, str]:
    """Write `names` over `shards` files; returns the weight_map."""
    weight_map: dict[str, str] = {}
    per = -(-len(names) // shards)
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        chunk = names[s * per : (s + 1) * per]
        save_file({n: torch.zeros(SHAPE, dtype=dtype) for n in chunk}, str(path / fname))
        weight_map.update({n: fname for n in chunk})
    return weight_map


def make_model_dir(
    path: Path,
    config: dict[str, Any],
    names: list[str],
    mtp_names: list[str],
    *,
    mtp: str = "index",
    shards: int = 3,
    tokenizer: bool = True,
    dtype: torch.dtype = torch.bfloat16,
) -> FakeModel:
    """Write a model directory. `mtp`: 'index' (MTP tensors in the shards and the index),
    'separate' (an mtp.safetensors not in the index) or 'none' (no MTP tensors)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    main = names + (mtp_names if mtp == "index" else [])
    weight_map = _write_shards(path, main, shards, dtype)
    written = list(main)
    if mtp == "separate":
        save_file({n: torch.zeros(SHAPE, dtype=dtype) for n in mtp_names}, str(path / "mtp.safetensors"))
        written += mtp_names
    total = len(main) * prod(SHAPE) * torch.finfo(dtype).bits // 8
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    if tokenizer:
        write_real_tokenizer(path)
        (path / "generation_config.json").write_text(json.dumps({"temperature": 0.6}))
    return FakeModel(path, {n: SHAPE for n in written}, tuple(mtp_names if mtp != "none" else ()))


@functools.cache
def _tiny_tokenizer() -> Path:
    """The kit's tiny tokenizer, trained once per test process."""
    from kit.demo.tiny_tokenizer import write_tokenizer

    out = Path(tempfile.mkdtemp(prefix="kit-tiny-tok-"))
    atexit.register(shutil.rmtree, out, True)
    return write_tokenizer(out)


def write_real_tokenizer(path: Path) -> None:
    """A tokenizer transformers loads, its chat template inside tokenizer_config.json."""
    tiny = _tiny_tokenizer()
    shutil.copy(tiny / "tokenizer.json", path / "tokenizer.json")
    config = json.loads((tiny / "tokenizer_config.json").read_text())
    config["chat_template"] = (tiny / "chat_template.jinja").read_text()
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def qwen36_like(path: Path, mtp: str = "index") -> FakeModel:
    """Qwen3.6-27B layout: 64 layers, every 4th full attention, `mtp.*` tensors."""
    cfg = load_config("qwen3_6_27b.json")
    p = "model.language_model"
    names = [f"{p}.embed_tokens.weight", f"{p}.norm.weight", "lm_head.weight"]
    for i in range(64):
        names += _layer_names(p, i, "full" if (i + 1) % 4 == 0 else "linear")
    mtp_names = ["mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", *_layer_names("mtp", 0, "full")]
    return make_model_dir(path, cfg, names, mtp_names, mtp=mtp)


def deepseek_like(path: Path, nextn: bool = True) -> FakeModel:
    """DeepSeek-V3 layout: 61 layers, the next-n (MTP) layer stored as `model.layers.61.*`."""
    cfg = load_config("deepseek_v3.json")
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(61):
        names += [
            f"model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight",
            f"model.layers.{i}.mlp.gate.weight",
        ]
    mtp_names = [f"model.layers.61.{n}.weight" for n in ("enorm", "hnorm", "eh_proj", "shared_head.head")]
    return make_model_dir(path, cfg, names, mtp_names, mtp="index" if nextn else "none", shards=4)


def dense_qwen3(path: Path) -> FakeModel:
    """Qwen3-32B layout: 64 standard-attention layers, no MTP."""
    cfg = load_config("qwen3_32b.json")
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(64):
        names += _layer_names("model", i, "full")
    return make_model_dir(path, cfg, names, [], mtp="none")


FAKE_LAUNCHER = """
import argparse
p = argparse.ArgumentParser(prog="launch_server")
for flag in ("--model-path", "--host", "--port", "--tp-size", "--dp-size", "--mem-fraction-static",
             "--speculative-algorithm", "--mamba-radix-cache-strategy", "--enable-metrics"):
    p.add_argument(flag)
p.parse_args()
"""


def install_fake_sglang(site: Path, monkeypatch: Any) -> Path:
    """A site directory with an installed-looking `sglang` 0.0.1 whose launcher only parses flags
    (it knows the newer `--mamba-radix-cache-strategy`), put on PYTHONPATH for child interpreters."""
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(FAKE_LAUNCHER)
    dist = site / "sglang-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site
