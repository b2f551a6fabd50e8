"""Findings of section `model`, from what `inspect_model_dir` read."""

from __future__ import annotations

from typing import Any

from kit.artifacts import Finding
from kit.artifacts.probe_sections import ModelFacts, MtpFacts, TokenizerFacts, TokenizerLoad
from kit.modelshape import MEANING
from kit.probe.findings import finding

MOE_ROUTING = (
    "; a mixture of experts: a random router does not pick experts as the trained one does (on the "
    "H200 a Qwen3-30B-A3B shape's batch of 64 stepped in less time than reading the experts that real "
    "routing touches takes: docs/lab/h200/sglang/README.md), so its step times above batch 1 can be "
    "faster than the real model's"
)


def weight_bytes(info: ModelFacts) -> tuple[int | None, int, str]:
    """(main weight bytes, MTP bytes, source): headers, else the index, else (None, 0, 'config')."""
    st, index = info.get("safetensors"), info.get("index")
    if st and st["tensors"] and not st["errors"] and not (index and index["missing"]):
        return st["bytes_main"], st["bytes_mtp"], "safetensors headers"
    total_size = index.get("total_size") if index else None
    if total_size:
        return int(total_size), 0, "index metadata.total_size"
    return None, 0, "config (parameter count x dtype)"


def model_findings(info: ModelFacts) -> list[Finding]:
    """Findings of section `model` from `inspect_model_dir`'s result."""
    f = _f
    if not info["exists"]:
        return [
            f(
                "path",
                "fail",
                info["path"],
                "model directory does not exist",
                "set model.path to a local Hugging Face model directory (or model.demo: true)",
            )
        ]
    out = [_config_finding(info), *_weights_findings(info)]
    out += _tokenizer_findings(info["tokenizer"], info["path"])
    gen = info["generation_config"]
    out.append(
        f("generation_config", "ok", gen, "generation_config.json read")
        if gen and "error" not in gen
        else f(
            "generation_config",
            "warn",
            gen,
            (gen or {}).get("error", "no generation_config.json"),
            "engines then use their own sampling defaults: set sampling explicitly in params",
        )
    )
    out.append(_mtp_finding(info["mtp"]))
    return out


def _tokenizer_findings(tok: TokenizerFacts, path: str) -> list[Finding]:
    """`tokenizer`: files present and loaded by transformers; `chat_template`: present and renders."""
    load = tok.get("load") or {}
    if not tok["files"]:
        found = _f(
            "tokenizer",
            "fail",
            None,
            "no tokenizer.json / tokenizer.model / vocab.json",
            "copy the tokenizer files from the model's repository into the directory",
        )
    elif load.get("loaded") is False:
        found = _f(
            "tokenizer",
            "fail",
            tok["files"],
            f"transformers cannot load the tokenizer in {path}: {load['error'][:400]}",
            "copy tokenizer.json and tokenizer_config.json again from the model's repository (a "
            "truncated download or a Git LFS pointer file does not load), or upgrade transformers",
        )
    else:
        what = f"{load['class']}, {load['vocab_size']} tokens" if load else "not loaded"
        found = _f("tokenizer", "ok", tok["files"], f"found {', '.join(tok['files'])}; loads: {what}")
    return [found, _template_finding(tok, load)]


def _template_finding(tok: TokenizerFacts, load: TokenizerLoad) -> Finding:
    if not tok["chat_template"]:
        return _f(
            "chat_template",
            "warn",
            None,
            "no chat template: chat requests will be rejected or unformatted",
            "add chat_template.jinja, or send raw completions",
        )
    if load.get("template_error"):
        return _f(
            "chat_template",
            "fail",
            tok["chat_template_in"],
            f"the chat template does not render a one-message chat: {load['template_error'][:400]}",
            f"fix the template in {', '.join(tok['chat_template_in'])} (copy it again from the model's "
            "repository)",
        )
    return _f("chat_template", "ok", tok["chat_template_in"], f"in {', '.join(tok['chat_template_in'])}")


def _f(name: str, status: str, value: Any, reason: str, action: str = "") -> Finding:
    return finding("model", name, status, value, reason, action)  # type: ignore[arg-type]


def _config_finding(info: ModelFacts) -> Finding:
    if info["config_error"]:
        return _f(
            "config.json",
            "fail",
            None,
            info["config_error"],
            "restore config.json from the model's repository",
        )
    c = info["config"]
    layout = (
        f"{len(c['full_attention_layers'])} full + {len(c['linear_attention_layers'])} linear-attention "
        f"layers"
        if c["is_hybrid"]
        else f"{c['num_layers']} layers"
    )
    kind = "MLA" if c["is_mla"] else f"{c['num_heads']}q/{c['num_kv_heads']}kv heads x {c['head_dim']}"
    why = f"{'/'.join(c['architectures']) or c['model_type']}: {layout}, {kind}, {c['dtype']}"
    return _f("config.json", "ok", c["architectures"], why)


def _weights_findings(info: ModelFacts) -> list[Finding]:
    index, st = info["index"], info["safetensors"]
    out = []
    if index and index.get("error"):
        out.append(_f("index", "fail", None, index["error"], "re-download model.safetensors.index.json"))
    elif index and index["missing"]:
        out.append(
            _f(
                "shards",
                "fail",
                index["missing"],
                f"{len(index['missing'])} of {len(index['shards'])} "
                f"shards in the index are missing: {', '.join(index['missing'])}",
                "download the missing shards (huggingface-cli download <repo> <file>)",
            )
        )
    elif index:
        out.append(
            _f("shards", "ok", len(index["shards"]), f"all {len(index['shards'])} indexed shards present")
        )
    elif not st["files"] and info.get("shape_only"):
        shape = info["shape_only"]
        config = info.get("config")
        moe = bool(config and config["is_moe"])
        return out + [
            _f(
                "weights",
                "warn",
                shape.get("shape"),
                f"{MEANING}: a {shape.get('source') or 'published'} config without weights "
                "(kit model-shape); the engine loads random weights (--load-format dummy)"
                + (MOE_ROUTING if moe else ""),
                "measure speed and memory here; generate real text only with the real weights"
                + ("; take an MoE's steps above batch 1 as a lower bound" if moe else ""),
            )
        ]
    elif not st["files"]:
        return out + [
            _f(
                "weights",
                "fail",
                info["other_weights"],
                "no *.safetensors weights in the directory",
                "download the safetensors weights (or convert .bin weights to safetensors)",
            )
        ]
    for name, err in st["errors"].items():
        out.append(
            _f(
                f"header:{name}",
                "fail",
                None,
                f"unreadable safetensors header: {err}",
                f"re-download {name} (truncated or corrupt)",
            )
        )
    if st["tensors"]:
        out.append(_params_finding(info))
    return out


def _params_finding(info: ModelFacts) -> Finding:
    st, cfg = info["safetensors"], info["config"]
    why = f"{_count(st['params_main'])} params (+{_count(st['params_mtp'])} MTP), mostly {st['dtype']}"
    expect = cfg["params_from_config"] if cfg else None
    if expect and abs(st["params_main"] - expect) > 0.25 * expect:
        return _f(
            "params",
            "warn",
            st["params_main"],
            why + f"; config implies {_count(expect)}",
            "check for missing shards or a quantized checkpoint (packed weights count fewer elements)",
        )
    return _f("params", "ok", st["params_main"], why)


def _count(n: int) -> str:
    return f"{n / 1e9:.3g} B" if n >= 1e8 else f"{n:,}"


def _mtp_finding(mtp: MtpFacts) -> Finding:
    ev = "; ".join(mtp["evidence"])
    if mtp["unindexed_files"]:
        return _f(
            "mtp",
            "warn",
            mtp["status"],
            f"{', '.join(mtp['unindexed_files'])} is not listed in "
            "model.safetensors.index.json: SGLang and vLLM load only indexed files",
            "add its tensors to the index's weight_map (or merge the file) before using MTP",
        )
    if mtp["status"] == "declared_missing":
        return _f(
            "mtp",
            "warn",
            mtp["status"],
            f"config declares MTP layers but no MTP weights: {ev}",
            "download the full checkpoint with its mtp.* tensors, or use NGRAM / an EAGLE draft model",
        )
    return _f("mtp", "ok", mtp["status"], ev)
