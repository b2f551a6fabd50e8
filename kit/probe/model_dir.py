"""What a model directory holds: config, shards, parameter count, tokenizer, and MTP weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.arch import ModelArch, arch_from_config
from kit.artifacts.probe_sections import ArchFacts, ModelFacts, MtpFacts, TokenizerFacts
from kit.errors import ModelDirError
from kit.modelshape import shape_of
from kit.probe import tokenizer_check
from kit.probe.weights import HeaderScan, ShardIndex, is_mtp_tensor, read_index, summarize_headers

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def read_config(model_dir: Path) -> tuple[dict[str, Any] | None, ModelArch | None, str | None]:
    """(raw config, ModelArch, error message): the error says what is wrong with config.json."""
    path = model_dir / "config.json"
    if not path.is_file():
        return None, None, f"{path} not found"
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, None, f"config.json is not valid JSON: {e}"
    if not isinstance(raw, dict):
        return None, None, f"config.json holds a {type(raw).__name__}, not an object"
    try:
        return raw, arch_from_config(raw), None
    except (ModelDirError, ValueError, TypeError) as e:
        return raw, None, f"config.json does not describe a decoder-only LM: {e}"


def describe_arch(arch: ModelArch) -> ArchFacts:
    """The config facts a person checks, with the hybrid layer pattern spelled out."""
    full = [i for i, t in enumerate(arch.layer_types) if t == "full_attention"]
    linear = [i for i, t in enumerate(arch.layer_types) if t == "linear_attention"]
    total, active = arch.param_counts()
    return ArchFacts(
        architectures=list(arch.architectures),
        model_type=arch.model_type,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_heads=arch.num_heads,
        num_kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        vocab_size=arch.vocab_size,
        tie_embeddings=arch.tie_embeddings,
        dtype=arch.dtype,
        max_positions=arch.max_positions,
        is_mla=arch.is_mla,
        is_moe=arch.is_moe,
        is_hybrid=arch.is_hybrid,
        full_attention_layers=full,
        linear_attention_layers=linear,
        mtp_layers=arch.mtp_layers,
        params_from_config=total,
        active_params_from_config=active,
        kv_bytes_per_token=arch.kv_bytes_per_token(),
        state_bytes_per_seq=arch.state_bytes_per_seq(),
    )


def _tokenizer(model_dir: Path, load: bool) -> TokenizerFacts:
    files = [f for f in TOKENIZER_FILES if (model_dir / f).is_file()]
    template_files = [f for f in TEMPLATE_FILES if (model_dir / f).is_file()]
    in_config = False
    tc = model_dir / "tokenizer_config.json"
    if tc.is_file():
        try:
            in_config = bool(json.loads(tc.read_text()).get("chat_template"))
        except (json.JSONDecodeError, AttributeError):
            in_config = False
    where = template_files + (["tokenizer_config.json"] if in_config else [])
    return TokenizerFacts(
        files=files,
        tokenizer_config=tc.is_file(),
        chat_template=bool(where),
        chat_template_in=where,
        load=tokenizer_check.load_tokenizer(model_dir) if files and load else None,
    )


def _generation_config(model_dir: Path) -> dict[str, Any] | None:
    """generation_config.json as read (open-ended: its keys are the model's), or an `error`."""
    path = model_dir / "generation_config.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except json.JSONDecodeError as e:
        return {"error": f"generation_config.json is not valid JSON: {e}"}


def mtp_status(
    arch: ModelArch | None,
    raw: dict[str, Any] | None,
    index: ShardIndex | None,
    headers: HeaderScan,
    separate: list[str],
    shape_only: bool = False,
) -> MtpFacts:
    """present / declared_missing / absent_from_architecture, with the evidence for it. A shape-only
    folder's declared MTP layers count as present: the engine builds them with random weights."""
    text = (raw or {}).get("text_config") if isinstance((raw or {}).get("text_config"), dict) else raw or {}
    key = next((k for k in ("mtp_num_hidden_layers", "num_nextn_predict_layers") if text.get(k)), None)
    declared = arch.mtp_layers if arch else 0
    n_layers = arch.num_layers if arch else None
    in_index = [n for n in (index.weight_map if index else {}) if is_mtp_tensor(n, n_layers)]
    in_headers = headers.mtp_tensors
    indexed_files = set(index.summary["shards"] if index else [])
    evidence = [f"config {key} = {text[key]}" if key else "config declares no MTP layers"]
    evidence.append(
        f"{len(in_index)} MTP tensors in model.safetensors.index.json" if index else "no index file"
    )
    evidence.append(f"{len(in_headers)} MTP tensors in safetensors headers")
    evidence += [
        f"separate file {s}" + ("" if s in indexed_files or not index else " (not in the index)")
        for s in separate
    ]
    if shape_only and declared:
        evidence.append("shape only: the engine builds the MTP layers with random weights (accept length ~1)")
    found = bool(in_index or in_headers or separate or (shape_only and declared))
    status = "present" if found else ("declared_missing" if declared else "absent_from_architecture")
    unindexed = [s for s in separate if index and s not in indexed_files]
    return MtpFacts(
        status=status,
        declared_layers=declared,
        config_key=key,
        tensors_in_index=len(in_index),
        tensors_in_headers=len(in_headers),
        separate_files=separate,
        unindexed_files=unindexed,
        evidence=evidence,
    )


def inspect_model_dir(path: str | Path, load_tokenizer: bool = True) -> ModelFacts:
    """Everything the probe reads from a model directory, without loading a tensor; the tokenizer is
    loaded in a child process unless `load_tokenizer` is False.

    Never raises for a broken directory: problems are recorded (`config_error`, missing shards,
    header errors) for `model_findings` to turn into findings.
    """
    model_dir = Path(path).expanduser()
    info = ModelFacts(path=str(model_dir), exists=model_dir.is_dir())
    if not info["exists"]:
        return info
    raw, arch, err = read_config(model_dir)
    info["config_error"] = err
    info["config"] = describe_arch(arch) if arch else None
    index = read_index(model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    headers = summarize_headers(files, arch.num_layers if arch else None)
    separate = [p.name for p in files if p.name.startswith("mtp")]
    info["index"] = index.summary if index else None
    info["safetensors"] = headers.facts
    info["other_weights"] = sorted(
        p.name for p in model_dir.iterdir() if p.suffix in (".bin", ".pt", ".gguf")
    )
    info["tokenizer"] = _tokenizer(model_dir, load_tokenizer)
    info["generation_config"] = _generation_config(model_dir)
    info["shape_only"] = shape_of(model_dir)
    info["mtp"] = mtp_status(arch, raw, index, headers, separate, shape_only=info["shape_only"] is not None)
    return info
