"""Model directory inspection on fabricated directories (real safetensors files over tiny tensors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_models import deepseek_like, dense_qwen3, qwen36_like

from kit.probe import model_dir
from kit.probe.model_findings import model_findings, weight_bytes
from kit.probe.weights import read_header


def by_name(findings: list[dict]) -> dict[str, dict]:
    return {f["name"]: f for f in findings}


def inspect_model_dir(path: Path) -> dict:
    """The directory's facts without the tokenizer load (a child process; tested on its own below)."""
    return model_dir.inspect_model_dir(path, load_tokenizer=False)


def test_qwen36_hybrid_with_mtp_in_index(tmp_path: Path) -> None:
    m = qwen36_like(tmp_path / "q")
    info = inspect_model_dir(m.path)
    c = info["config"]
    assert c["is_hybrid"] and c["model_type"] == "qwen3_5" and c["head_dim"] == 256
    assert c["full_attention_layers"] == list(range(3, 64, 4))
    assert len(c["linear_attention_layers"]) == 48
    assert info["mtp"]["status"] == "present"
    assert info["mtp"]["tensors_in_index"] == len(m.mtp_names) == info["mtp"]["tensors_in_headers"]
    st = info["safetensors"]
    assert st["params_main"] == m.main_params and st["params_mtp"] == m.mtp_params
    assert st["dtype"] == "BF16" and st["bytes_main"] == 2 * m.main_params
    f = by_name(model_findings(info))
    assert f["mtp"]["status"] == "ok" and f["shards"]["status"] == "ok"
    assert f["params"]["status"] == "warn"  # tiny tensors vs a 27B config: the mismatch is reported
    assert weight_bytes(info) == (2 * m.main_params, 2 * m.mtp_params, "safetensors headers")


def test_qwen36_without_mtp_tensors_is_declared_missing(tmp_path: Path) -> None:
    info = inspect_model_dir(qwen36_like(tmp_path / "q", mtp="none").path)
    assert info["mtp"]["status"] == "declared_missing"
    assert info["mtp"]["config_key"] == "mtp_num_hidden_layers"
    f = by_name(model_findings(info))["mtp"]
    assert f["status"] == "warn" and "mtp" in f["action"].lower()


def test_qwen36_separate_mtp_file_not_in_index_is_a_warning(tmp_path: Path) -> None:
    m = qwen36_like(tmp_path / "q", mtp="separate")
    info = inspect_model_dir(m.path)
    assert info["mtp"]["status"] == "present"
    assert info["mtp"]["unindexed_files"] == ["mtp.safetensors"] and info["mtp"]["tensors_in_index"] == 0
    assert info["safetensors"]["params_mtp"] == m.mtp_params
    f = by_name(model_findings(info))["mtp"]
    assert f["status"] == "warn" and "mtp.safetensors" in f["reason"]


def test_deepseek_next_n_layer(tmp_path: Path) -> None:
    with_n = inspect_model_dir(deepseek_like(tmp_path / "a").path)
    assert with_n["config"]["is_mla"] and with_n["config"]["is_moe"]
    assert with_n["mtp"]["status"] == "present" and with_n["mtp"]["config_key"] == "num_nextn_predict_layers"
    assert with_n["mtp"]["tensors_in_index"] == 4  # model.layers.61.* is past the 61 regular layers
    without = inspect_model_dir(deepseek_like(tmp_path / "b", nextn=False).path)
    assert without["mtp"]["status"] == "declared_missing"


def test_dense_qwen3_has_no_mtp_in_its_architecture(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "d")
    info = inspect_model_dir(m.path)
    assert info["mtp"]["status"] == "absent_from_architecture"
    assert not info["config"]["is_hybrid"] and info["config"]["kv_bytes_per_token"] == 64 * 2 * 8 * 128 * 2
    assert by_name(model_findings(info))["mtp"]["status"] == "ok"
    assert info["tokenizer"]["chat_template_in"] == ["tokenizer_config.json"]


def test_missing_shard_is_a_fail_naming_it(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "d")
    (m.path / "model-00002-of-00003.safetensors").unlink()
    f = by_name(model_findings(inspect_model_dir(m.path)))["shards"]
    assert f["status"] == "fail" and f["value"] == ["model-00002-of-00003.safetensors"]
    assert "model-00002-of-00003.safetensors" in f["reason"]


def test_invalid_config_is_a_fail_with_reason_and_the_rest_is_still_read(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "d")
    (m.path / "config.json").write_text('{"num_hidden_layers": 64,')
    info = inspect_model_dir(m.path)
    f = by_name(model_findings(info))
    assert f["config.json"]["status"] == "fail" and "not valid JSON" in f["config.json"]["reason"]
    assert f["shards"]["status"] == "ok" and f["tokenizer"]["status"] == "ok"
    (m.path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    f = by_name(model_findings(inspect_model_dir(m.path)))["config.json"]
    assert f["status"] == "fail" and "num_hidden_layers" in f["reason"]


def test_corrupt_header_and_missing_tokenizer(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "d")
    (m.path / "model-00001-of-00003.safetensors").write_bytes(b"\xff" * 16)
    (m.path / "tokenizer.json").unlink()
    (m.path / "tokenizer_config.json").unlink()
    f = by_name(model_findings(inspect_model_dir(m.path)))
    assert f["header:model-00001-of-00003.safetensors"]["status"] == "fail"
    assert f["tokenizer"]["status"] == "fail" and f["chat_template"]["status"] == "warn"


def test_no_weights_and_no_directory(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(
        (Path(__file__).parent / "configs/qwen3_32b.json").read_text()
    )
    info = inspect_model_dir(tmp_path / "cfg")
    assert by_name(model_findings(info))["weights"]["status"] == "fail"
    assert weight_bytes(info) == (None, 0, "config (parameter count x dtype)")
    assert model_findings(inspect_model_dir(tmp_path / "nowhere"))[0]["status"] == "fail"


def test_read_header_rejects_non_safetensors(tmp_path: Path) -> None:
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"abc")
    with pytest.raises(ValueError):
        read_header(p)


def test_the_tokenizer_is_loaded_and_a_broken_one_fails_with_the_loaders_message(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "d")
    from transformers import AutoTokenizer

    f = by_name(model_findings(model_dir.inspect_model_dir(m.path)))
    tokens = len(AutoTokenizer.from_pretrained(m.path))  # the BPE's 2048 and the added markup tokens
    assert tokens > 2048
    assert (
        f["tokenizer"]["status"] == "ok"
        and f"loads: TokenizersBackend, {tokens} tokens" in f["tokenizer"]["reason"]
    )
    assert f["chat_template"]["status"] == "ok"
    (m.path / "tokenizer.json").write_text("{}")  # exists, parses as JSON, is no tokenizer
    f = by_name(model_findings(model_dir.inspect_model_dir(m.path)))["tokenizer"]
    assert f["status"] == "fail" and f["value"] == ["tokenizer.json"]
    assert f"transformers cannot load the tokenizer in {m.path}: KeyError: 'added_tokens'" in f["reason"]
    assert "copy tokenizer.json and tokenizer_config.json again" in f["action"]


def test_a_chat_template_that_does_not_render_fails(tmp_path: Path) -> None:
    m = dense_qwen3(tmp_path / "d")
    config = json.loads((m.path / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m.content }"  # unclosed tag
    (m.path / "tokenizer_config.json").write_text(json.dumps(config))
    f = by_name(model_findings(model_dir.inspect_model_dir(m.path)))
    assert f["tokenizer"]["status"] == "ok"
    t = f["chat_template"]
    assert t["status"] == "fail" and "does not render a one-message chat: TemplateSyntaxError" in t["reason"]
