"""The embedded demo model: a tiny Qwen3-architecture causal LM built locally, no download.

`ensure_demo_model(path)` trains a byte-level BPE tokenizer with Qwen3's chat template and
reasoning / tool-call tags (see kit.demo.tokenizer) and a ~0.5M-parameter Qwen3 model on a
generated chat corpus (see kit.demo.corpus) in about 80 s of one CPU core. Its completions
read like words and follow Qwen3's shapes: a `<think>` block first when thinking is on,
`<tool_call>` JSON when the request offers tools, so real engines' reasoning and tool-call
parsers have something to parse. It saves as an ordinary Hugging Face model directory that
`transformers serve` and vLLM load like any other. Everything is seeded and deterministic (one torch
thread, deterministic algorithms), and trained in a child process whose kernels are pinned to one
instruction set (`PINNED_KERNELS`: torch's and MKL's AVX2 paths), so the same code and packages build
the same bytes on any x86-64 CPU with AVX2, an AVX-512 one included. The directory is built in a
temporary folder and renamed into place, with a marker file written last that records
the sha256 of every file built and the package versions that built them (`verify_demo_model`
checks a folder against it), so an interrupted build is simply redone.

    python -m kit.demo.model .cache/demo/model     # build (or reuse) the demo model
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kit.demo.corpus import examples, tokenizer_texts
from kit.demo.tokenizer import train_tokenizer
from kit.demo.training import TRAIN_THREADS, deterministic, encode, pack, train
from kit.errors import KitError
from kit.modelshape import DEMO_MARKER
from kit.runfolder import current_umask

MARKER = DEMO_MARKER
MODEL_SHAPE = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
VERSION = 5
TRAINING = dict(corpus=4000, tokenizer_examples=1500, window=384, row_length=512, batch=4, lr=5e-3)
"""Corpus size, the examples the BPE learns from (more changes its merges little and costs seconds),
prompt window and packed row length in tokens, rows per step, peak learning rate."""
PROMPT_WEIGHT = 0.2
"""Loss weight of prompt tokens (completion tokens: 1)."""
CHECKOUT_MODEL = Path(__file__).resolve().parents[2] / ".cache" / "demo" / "model"
"""Where this checkout's `params/demo.yaml` and `kit demo-assets` build the demo model."""


PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
"""The training child's environment: torch's CPU kernels and MKL's matrix products on their AVX2 paths
whatever the CPU offers. Unpinned, one Xeon built three different model.safetensors (AVX-512, the
AVX2 kernels, the generic ones: MKL's own path alone moves the bytes); pinned, about 1.3x the
AVX-512 build's time (the generic paths: 4.5x)."""
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors")
"""Whose versions the marker records: the bytes built are the same for the same versions."""


def is_demo_model(path: Path) -> bool:
    """True when `path` holds a completely built demo model of the current version."""
    return (read_marker(path) or {}).get("version") == VERSION


def read_marker(path: Path) -> dict | None:
    """The marker of a built demo model (version, seed, file hashes, ...), or None."""
    try:
        return json.loads((Path(path) / MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def file_hashes(path: Path) -> dict[str, str]:
    """sha256 of every file of a model folder but the marker, by name."""
    files = sorted(f for f in Path(path).iterdir() if f.is_file() and f.name != MARKER)
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def verify_demo_model(path: Path) -> list[str]:
    """What differs between a built demo model's files and the hashes its marker recorded (empty: none)."""
    recorded = (read_marker(path) or {}).get("files")
    if not recorded:
        return [f"{Path(path) / MARKER} records no file hashes"]
    found = file_hashes(path)
    return [
        f"{name}: recorded {recorded.get(name, 'absent')[:12]}, found {found.get(name, 'absent')[:12]}"
        for name in sorted(set(recorded) | set(found))
        if recorded.get(name) != found.get(name)
    ]


def build_notice(path: Path, params_file: Path | None = None) -> str | None:
    """The line to show before `ensure_demo_model(path)` trains a model (a few minutes of CPU): where,
    and why there when it is not this checkout's `.cache/demo/model`; None when one is built already."""
    path = Path(path)
    if is_demo_model(path):
        return None
    line = f"building the demo model at {path} (model.demo: true and none there yet; a few minutes of CPU)"
    if path.resolve() == CHECKOUT_MODEL:
        return line
    where = f"model.path of {params_file}" if params_file else "model.path"
    line += f": {where} points outside this checkout's {CHECKOUT_MODEL}"
    if is_demo_model(CHECKOUT_MODEL):
        line += ", where one is built already: point model.path there to skip this build"
    return line


def ensure_demo_model(path: Path, *, train_steps: int = 400, seed: int = 0, quiet: bool = False) -> Path:
    """Build the demo model at `path` unless a complete one is already there; return `path`."""
    path = Path(path)
    if is_demo_model(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".demo-model-", dir=path.parent) as tmp:
        build = Path(tmp) / "model"
        info = _build_pinned(build, train_steps=train_steps, seed=seed, quiet=quiet)
        info["files"] = file_hashes(build)
        (build / MARKER).write_text(json.dumps(info, indent=2))
        as_the_user_writes(build)
        if path.exists():
            shutil.rmtree(path)
        build.rename(path)
    return path


def as_the_user_writes(folder: Path) -> None:
    """Give `folder` and its files the modes the user's files get (0777 / 0666 less the umask):
    safetensors writes the weights 0600, which left them unreadable to a colleague or a server
    running as another user."""
    umask = current_umask()
    folder.chmod(0o777 & ~umask)
    for f in folder.rglob("*"):
        f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)


def _build_pinned(out: Path, *, train_steps: int, seed: int, quiet: bool) -> dict:
    """`_build` in a child process with `PINNED_KERNELS` (read once, when torch loads: this process may
    have loaded it already); its progress bar on this stderr."""
    info = out.parent / "build.json"
    argv = [sys.executable, "-m", "kit.demo.model", "--build-into", str(out), str(train_steps), str(seed)]
    argv += ["--quiet"] if quiet else []
    env = {**os.environ, **PINNED_KERNELS, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL)
    if done.returncode != 0 or not info.is_file():
        raise KitError(
            f"building the demo model into {out} failed (exit {done.returncode}): see its error above"
        )
    return json.loads(info.read_text())


def _build(out: Path, *, train_steps: int, seed: int, quiet: bool) -> dict:
    """Train the tokenizer and the model on the seeded corpus and save both into `out`."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    started = time.perf_counter()
    corpus = examples(TRAINING["corpus"], seed)
    tokenizer = train_tokenizer(
        tokenizer_texts(corpus[: TRAINING["tokenizer_examples"]]), individual_digits=True
    )
    length = TRAINING["row_length"]
    encoded = encode(corpus, tokenizer, TRAINING["window"], length)
    inputs, weights = pack(encoded, tokenizer.pad_token_id, PROMPT_WEIGHT, length)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **MODEL_SHAPE,
    )
    config._attn_implementation = "sdpa"  # fixed, not whatever this install would pick
    with deterministic(seed):
        model = Qwen3ForCausalLM(config).float()
        loss = train(model, inputs, weights, steps=train_steps, seed=seed, batch=TRAINING["batch"],
                     lr=TRAINING["lr"], desc="training demo model", quiet=quiet)  # fmt: skip
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=True, temperature=0.7
    ).save_pretrained(out)
    return {
        "version": VERSION,
        "seed": seed,
        "train_steps": train_steps,
        "final_loss": round(loss, 4),
        "build_seconds": round(time.perf_counter() - started, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "threads": TRAIN_THREADS,
        "cpu_capability": _cpu_capability(),
        "pinned": {k: os.environ.get(k) for k in PINNED_KERNELS},
        "packages": {name: _version(name) for name in PACKAGES},
    }


def _cpu_capability() -> str:
    """The instruction set torch's CPU kernels ran on (AVX2 when pinned; a CPU without AVX2 runs a
    narrower one and builds other bytes), so a hash that differs from a colleague's can be told apart."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    if sys.argv[1:2] == ["--build-into"]:  # the child of _build_pinned
        into, steps, seed_ = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        built = _build(into, train_steps=steps, seed=seed_, quiet="--quiet" in sys.argv)
        (into.parent / "build.json").write_text(json.dumps(built))
    else:
        target = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/demo/model")
        print(ensure_demo_model(target))
