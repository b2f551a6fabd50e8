"""Shape-only model folders (`kit model-shape`): a published config, a tokenizer that decodes every id
a random model can emit, a marker the probe and the engine flavors read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from transformers import AutoTokenizer

from kit.arch import arch_from_config
from kit.demo.shape_model import write_shape_model
from kit.engines.flavors import server_command
from kit.errors import EngineError, KitError
from kit.modelshape import MARKER, MEANING, SHAPES, shape_of
from kit.params import RunParams
from kit.probe.model_dir import inspect_model_dir
from kit.probe.model_findings import model_findings

FAKE_SGLANG = REPO / "tests" / "fake_sglang"


@pytest.fixture(scope="module")
def qwen3_8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape_model("qwen3-8b", tmp_path_factory.mktemp("shape") / "qwen3-8b")


def test_every_shape_is_its_published_size() -> None:
    expect_b = {
        "qwen3-8b": 8.19,
        "qwen3-32b": 32.8,
        "qwen3-30b-a3b": 30.5,
        "llama-3.1-8b": 8.03,
        "qwen3-8b-eagle3": 0.40,
        "qwen3.6-27b": 26.9,
    }  # fmt: skip; the draft: 811 MB in bf16, as EAGLE3-LLaMA3.1-8B; the 27B: its text model and MTP layer
    assert set(SHAPES) == set(expect_b)
    for name, b in expect_b.items():
        assert SHAPES[name].params_b == pytest.approx(b, rel=0.01), name
    moe = arch_from_config(SHAPES["qwen3-30b-a3b"].config)
    assert moe.is_moe and moe.param_counts()[1] / 1e9 == pytest.approx(3.3, rel=0.05)  # "A3B"


def test_a_multimodal_shape_holds_its_processor_and_its_tags_at_their_ids(tmp_path: Path) -> None:
    """Qwen3.6-27B is a vision-language architecture: SGLang loads its processor at start (image and
    video processor configs, the vision tags looked up by name), whether or not a request holds an
    image. The tags sit at the ids the config gives them; every other id still decodes to text."""
    out = write_shape_model("qwen3.6-27b", tmp_path / "q36")
    config = json.loads((out / "config.json").read_text())
    assert config["text_config"]["mtp_num_hidden_layers"] == 1
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        assert json.loads((out / name).read_text())["processor_class"] == "Qwen3VLProcessor"
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == config["text_config"]["vocab_size"] == 248320
    for tag, key in (("<|image_pad|>", "image_token_id"), ("<|vision_start|>", "vision_start_token_id")):
        assert tok.convert_tokens_to_ids(tag) == config[key]
    for i in (3, 2048, 248055, 248058, 248319):
        assert tok.decode([i]).strip(), i
    info = inspect_model_dir(out)
    assert info["mtp"]["status"] == "present" and info["shape_only"]["shape"] == "qwen3.6-27b"


def test_the_folder_holds_config_tokenizer_and_marker(qwen3_8b: Path) -> None:
    assert json.loads((qwen3_8b / "config.json").read_text()) == SHAPES["qwen3-8b"].config
    marker = shape_of(qwen3_8b)
    assert marker == {"shape": "qwen3-8b", "source": "Qwen/Qwen3-8B", "weights": "none", "meaning": MEANING}
    assert not list(qwen3_8b.glob("*.safetensors"))
    tok = AutoTokenizer.from_pretrained(qwen3_8b)
    assert len(tok) == 151936
    # a random model emits any id below vocab_size: each decodes to some text, none to nothing
    for i in (3, 2047, 2048, 100_000, 151_935):
        assert tok.decode([i]).strip(), i
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(tok("say hello to the world")["input_ids"]) == "say hello to the world"


def test_no_parser_is_started_for_answers_that_cannot_hold_thinking_or_tools(qwen3_8b: Path) -> None:
    cmd = server_command(_params(qwen3_8b, "sglang"), 30000)
    assert "--reasoning-parser" not in cmd and "--tool-call-parser" not in cmd


def test_the_probe_says_shape_only_and_go(qwen3_8b: Path) -> None:
    findings = {f.name: f for f in model_findings(inspect_model_dir(qwen3_8b))}
    assert findings["weights"].status == "warn" and MEANING in findings["weights"].reason
    assert "--load-format dummy" in findings["weights"].reason
    assert all(f.status != "fail" for f in findings.values()), [
        f for f in findings.values() if f.status == "fail"
    ]


def test_the_probe_says_an_moe_shape_routes_unlike_the_trained_model(qwen3_8b: Path, tmp_path: Path) -> None:
    """On the H200 a Qwen3-30B-A3B shape stepped faster than reading its experts allows: the random
    router concentrates tokens on few experts, so its timings above batch 1 are a lower bound."""
    moe = write_shape_model("qwen3-30b-a3b", tmp_path / "moe")
    weights = {f.name: f for f in model_findings(inspect_model_dir(moe))}["weights"]
    assert weights.status == "warn" and "a random router does not pick experts" in weights.reason
    assert "lower bound" in weights.action
    dense = {f.name: f for f in model_findings(inspect_model_dir(qwen3_8b))}["weights"]
    assert "router" not in dense.reason and "lower bound" not in dense.action


def test_declared_mtp_layers_of_a_shape_count_as_present(tmp_path: Path) -> None:
    folder = tmp_path / "q36"
    folder.mkdir()
    (folder / "config.json").write_text((REPO / "tests" / "configs" / "qwen3_6_27b.json").read_text())
    assert inspect_model_dir(folder, load_tokenizer=False)["mtp"]["status"] == "declared_missing"
    (folder / MARKER).write_text(json.dumps({"shape": "qwen3.6-27b", "source": None}))
    mtp = inspect_model_dir(folder, load_tokenizer=False)["mtp"]
    assert mtp["status"] == "present" and any("random weights" in e for e in mtp["evidence"])


def _params(model: Path, flavor: str) -> RunParams:
    return RunParams(run="t", model={"path": model}, engine={"flavor": flavor})


def test_engines_that_can_load_random_weights_are_told_to(qwen3_8b: Path, tmp_path: Path) -> None:
    for name in ("sglang", "vllm"):
        cmd = server_command(_params(qwen3_8b, name), 30000)
        assert cmd[cmd.index("--load-format") + 1] == "dummy", name
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text((qwen3_8b / "config.json").read_text())
    assert "--load-format" not in server_command(_params(real, "sglang"), 30000)
    with pytest.raises(EngineError, match="cannot load random weights: serve it with flavor sglang or vllm"):
        server_command(_params(qwen3_8b, "transformers"), 30000)


def test_kit_model_shape_refuses_what_it_must_not_overwrite(tmp_path: Path) -> None:
    def kit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kit.cli", "model-shape", *args], capture_output=True, text=True
        )

    listed = kit("--list")
    assert listed.returncode == 0 and all(name in listed.stdout for name in SHAPES)
    assert kit("qwen3-9b", str(tmp_path / "x")).returncode == 2
    real = tmp_path / "real"
    real.mkdir()
    (real / "model.safetensors").write_bytes(b"weights")
    refused = kit("qwen3-32b", str(real), "--force")
    assert (
        refused.returncode == 2
        and "not shape only" in refused.stderr
        and (real / "model.safetensors").exists()
    )
    with pytest.raises(KitError, match="is not empty"):
        write_shape_model("llama-3.1-8b", real)
    done = kit("llama-3.1-8b", str(tmp_path / "llama"))
    assert done.returncode == 0 and shape_of(tmp_path / "llama")["shape"] == "llama-3.1-8b"
    again = kit("qwen3-32b", str(tmp_path / "llama"), "--force")  # a shape may replace a shape
    assert again.returncode == 0 and shape_of(tmp_path / "llama")["shape"] == "qwen3-32b"


def test_the_probe_reads_the_engine_as_its_server_runs(tmp_path: Path) -> None:
    """engine.env (here a PYTHONPATH holding the engine's packages, as on the lent H200) reaches the
    probe's child interpreters: the engine is found, its launcher's --help read."""
    from kit.probe.engine_env import inspect_engine_env

    bare = inspect_engine_env(Path(sys.executable), "sglang", tmp_path / "a")
    assert bare["interpreter"]["packages"]["sglang"] is None and "launcher" not in bare
    seen = inspect_engine_env(
        Path(sys.executable), "sglang", tmp_path / "b", None, {"PYTHONPATH": str(FAKE_SGLANG)}
    )
    assert seen["interpreter"]["packages"]["sglang"] == "0.0.2" and seen["env"] == ["PYTHONPATH"]
    assert "--load-format" in seen["launcher"]["flags"]
