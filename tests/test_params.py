"""Params files: typed, strict, with messages that name the file, the key and what is allowed."""

from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from kit.errors import ParamsError
from kit.params import dump_params, load_params, saved_params

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


def test_demo_params_load_and_resolve_paths():
    p = load_params(REPO / "params" / "demo.yaml")
    assert p.run == "demo"
    assert p.model.path == REPO / ".cache" / "demo" / "model"
    assert p.run_dir == REPO / "outputs" / "demo"
    assert all(f.is_absolute() for s in p.data.sources for f in s.data_files)
    assert len({s.adapter for s in p.data.sources}) == 6


def test_example_gpu_params_are_valid():
    p = load_params(REPO / "params" / "sglang-8gpu.example.yaml", check_paths=False)
    assert p.engine.flavor == "sglang" and p.engine.dp_size == 8


def test_unknown_key_names_file_key_and_allowed(tmp_path):
    f = write(tmp_path, "model: {path: m}\nengine: {flavour: sglang}\n")
    with pytest.raises(ParamsError) as e:
        load_params(f)
    msg = str(e.value)
    assert str(f) in msg and "engine.flavour" in msg and "flavor" in msg


def test_unknown_nested_key_in_list(tmp_path):
    f = write(tmp_path, "model: {path: m}\ndata: {sources: [{name: a, adapter: b, dataset: json, cnt: 3}]}\n")
    with pytest.raises(ParamsError, match=r"data\.sources\.0\.cnt.*allowed here: .*count"):
        load_params(f)


def test_wrong_type_names_key_and_value(tmp_path):
    f = write(tmp_path, "model: {path: m}\ngenerate: {concurrency: lots}\n")
    with pytest.raises(ParamsError, match=r"generate\.concurrency.*'lots'"):
        load_params(f)


def test_bad_choice_lists_allowed_values(tmp_path):
    f = write(tmp_path, "model: {path: m}\nengine: {flavor: tgi}\n")
    with pytest.raises(ParamsError, match=r"engine\.flavor.*'transformers'.*'sglang'"):
        load_params(f)


def test_missing_file_and_missing_required_key(tmp_path):
    with pytest.raises(ParamsError, match="params file not found"):
        load_params(tmp_path / "nope.yaml")
    with pytest.raises(ParamsError, match="missing required key 'model'"):
        load_params(write(tmp_path, "run: x\n"))


def test_external_needs_url(tmp_path):
    with pytest.raises(ParamsError, match="base_url"):
        load_params(write(tmp_path, "model: {path: m}\nengine: {flavor: external}\n"))


def test_invalid_yaml_and_run_override(tmp_path):
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(write(tmp_path, "model: [unclosed\n"))
    (tmp_path / "m").mkdir()  # a relative model.path must exist (its files are checked when a stage starts)
    p = load_params(write(tmp_path, "model: {path: m}\n"), run="other")
    assert p.run == "other" and p.model.path == tmp_path / "m"


def test_params_are_frozen_and_dump_roundtrips(tmp_path):
    p = load_params(REPO / "params" / "demo.yaml")
    with pytest.raises(ValidationError):
        p.run = "x"  # type: ignore[misc]
    f = write(tmp_path, dump_params(p))
    assert load_params(f) == p.model_copy(update={"source_file": f.resolve()})


@pytest.mark.parametrize(
    ("sampling", "key"),
    [
        ("{temperature: 5}", "generate.sampling.temperature"),
        ("{top_k: -3}", "generate.sampling.top_k"),
        ("{min_p: 1.5}", "generate.sampling.min_p"),
        ("{presence_penalty: 3}", "generate.sampling.presence_penalty"),
        ("{repetition_penalty: 0}", "generate.sampling.repetition_penalty"),
        ("{chat_template_kwargs: [enable_thinking]}", "generate.sampling.chat_template_kwargs"),
    ],
)
def test_out_of_range_sampling_names_the_key(tmp_path, sampling, key):
    f = write(tmp_path, f"model: {{path: m}}\ngenerate:\n  sampling: {sampling}\n")
    with pytest.raises(ParamsError) as e:
        load_params(f)
    assert key in str(e.value) and str(e.value).count("\n  - ") <= 1, str(e.value)


def test_recommended_sampling_loads(tmp_path):
    (tmp_path / "m").mkdir()
    text = """model: {path: m}
generate:
  sampling: {temperature: 0.6, top_p: 0.95, top_k: 20, min_p: 0, presence_penalty: 1.5,
             thinking: false, chat_template_kwargs: {foo: 1}}
data:
  sources: [{name: a, adapter: metamathqa, dataset: json, max_tokens: 512}]
"""
    p = load_params(write(tmp_path, text))
    assert p.generate.sampling.top_k == 20 and p.generate.sampling.thinking is False
    assert p.data.sources[0].max_tokens == 512


def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path):
    """YAML keeps the last of two equal keys without a word: `concurrency: 64` then `concurrency: 4096`
    ran at 4096. The kit refuses it instead, wherever the mapping is (here, inside a list item too)."""
    p = tmp_path / "dup.yaml"
    p.write_text(
        "run: x\nmodel: {path: /m}\ngenerate:\n  concurrency: 64\n  shard_rows: 10\n  concurrency: 4096\n"
    )
    with pytest.raises(ParamsError, match=r"dup.yaml: key 'concurrency' is given twice, on lines 4 and 6"):
        load_params(p)
    p.write_text("run: x\nmodel: {path: /m}\ndata:\n  sources:\n    - {name: a, adapter: b, name: c}\n")
    with pytest.raises(ParamsError, match=r"key 'name' is given twice, on lines 5 and 5"):
        load_params(p)


def test_secrets_stay_out_of_params_yaml(tmp_path, monkeypatch):
    """Issue 19, item 10: a key in engine.env or extra_args would be saved in params.yaml (and the
    server's log); the key's place is an environment variable named by engine.api_key_env."""
    (tmp_path / "m").mkdir()
    with pytest.raises(ParamsError, match="--api-key.*engine.api_key_env"):
        load_params(write(tmp_path, "model: {path: m}\nengine: {extra_args: [--api-key, s3cret]}\n"))
    with pytest.raises(ParamsError, match="engine.env sets HF_TOKEN.*Export it in the shell"):
        load_params(write(tmp_path, "model: {path: m}\nengine: {env: {HF_TOKEN: x, OMP_NUM_THREADS: '2'}}\n"))
    fine = load_params(
        write(tmp_path, "model: {path: m}\nengine: {env: {TOKENIZERS_PARALLELISM: 'false'}}\n")
    )
    assert fine.engine.api_key() is None
    keyed = load_params(write(tmp_path, "model: {path: m}\nengine: {api_key_env: MY_SERVER_KEY}\n"))
    monkeypatch.delenv("MY_SERVER_KEY", raising=False)
    with pytest.raises(ParamsError, match="no such environment variable is set: export MY_SERVER_KEY="):
        keyed.engine.api_key()
    monkeypatch.setenv("MY_SERVER_KEY", "s3cret")
    assert keyed.engine.api_key() == "s3cret"
    assert "s3cret" not in dump_params(keyed)


def to_root(folder: Path) -> str:
    """The `..`s that climb from `folder` to the filesystem root, as a moved params file's do."""
    return "../" * len(folder.resolve().parts[1:])


def test_a_moved_demo_params_file_is_refused_naming_each_path_it_would_make(tmp_path):
    # params/demo.yaml with its "../" climbing to the root, as from a copy in /tmp
    text = (REPO / "params" / "demo.yaml").read_text().replace("../", to_root(tmp_path) + "kit-t-absent/")
    f = write(tmp_path, text)
    with pytest.raises(ParamsError) as e:
        load_params(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: paths that are not where they should be:")
    for key, made in (("output_dir", "outputs"), ("model.path", ".cache/demo/model")):
        assert f"{key}: '{to_root(tmp_path)}kit-t-absent/{made}' would make /kit-t-absent/{made}" in msg
    assert "data.demo_fixtures" in msg and "a new folder /kit-t-absent at the filesystem root" in msg
    assert f"a relative path is read from {tmp_path.resolve()}, the params file's folder" in msg
    assert not Path("/kit-t-absent").exists()


def test_relative_inputs_that_do_not_exist_are_refused_naming_the_key(tmp_path):
    f = write(
        tmp_path,
        "model: {path: no-model}\nengine: {python: venv/bin/python}\ndecide: {profile: p.parquet}\n"
        "data: {sources: [{name: a, adapter: prompt_column, dataset: json,"
        " data_files: [a.jsonl, '*.jsonl']}]}\n",
    )
    with pytest.raises(ParamsError) as e:
        load_params(f)
    msg = str(e.value)
    for key, name in (
        ("model.path", "no-model"),
        ("engine.python", "venv/bin/python"),
        ("decide.profile", "p.parquet"),
        ("data.sources[0].data_files[0]", "a.jsonl"),
    ):
        assert f"{key}: {tmp_path.resolve() / name} does not exist ('{name}' in the file;" in msg, key
    assert f"data_files[1]: the pattern {tmp_path.resolve() / '*.jsonl'} matches no file" in msg
    (tmp_path / "no-model").mkdir()
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "p.parquet").write_text("")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").write_text("")
    assert load_params(f).engine.python == tmp_path.resolve() / "venv" / "bin" / "python"


def test_what_the_kit_makes_may_be_absent_below_an_existing_folder(tmp_path):
    f = write(tmp_path, "output_dir: runs/out\nmodel: {path: ../.cache/m, demo: true}\n")
    p = load_params(f)  # made on demand: the run folder, the demo model
    assert p.run_dir == tmp_path.resolve() / "runs" / "out" / "run" and not (tmp_path / "runs").exists()
    f = write(tmp_path, "model: {path: m}\nengine: {flavor: external, base_url: 'http://127.0.0.1:9'}\n")
    assert load_params(f).model.path == tmp_path.resolve() / "m"  # a server of someone else's: not read here


def test_replica_gpus_name_each_servers_gpus_and_a_shared_gpu_needs_a_kv_cap(tmp_path):
    """engine.replica_gpus: one CUDA_VISIBLE_DEVICES per replica (two servers on one H200 for the
    one-GPU part of the data-parallel issue); a GPU shared without a KV cap per server is refused,
    since SGLang sizes its cache from the memory free at its start and the later server finds none."""
    from kit.generate.session import replica_params

    (tmp_path / "m").mkdir()
    base = "model: {path: m}\nengine: {flavor: sglang, replicas: 2, "
    params = load_params(write(tmp_path, base + "replica_gpus: ['0,1', '4,5']}\n"))
    assert [replica_params(params, i).engine.env["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["0,1", "4,5"]
    with pytest.raises(ParamsError, match="names 3 GPU group.s. for 2 replica"):
        load_params(write(tmp_path, base + "replica_gpus: ['0', '1', '2']}\n"))
    with pytest.raises(
        ParamsError, match="two servers on one GPU.*add --max-total-tokens N to engine.extra_args"
    ):
        load_params(write(tmp_path, base + "replica_gpus: ['0', '0']}\n"))
    shared = load_params(
        write(tmp_path, base + "replica_gpus: ['0', '0'], extra_args: [--max-total-tokens, '200000']}\n")
    )
    assert [replica_params(shared, i).engine.env["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["0", "0"]


def test_every_missing_input_is_named_in_one_error_before_anything_is_built(tmp_path):
    """Absolute paths too, every source's data files, patterns and the demo's fixture names: one
    error lists them all when the file loads, so no demo model is trained before a data path fails."""
    from kit.demo.fixtures import SOURCES, write_fixtures

    there, model = tmp_path / "there.jsonl", tmp_path / "models" / "absent"
    there.write_text('{"prompt": "hi"}\n')
    f = write(
        tmp_path,
        f"model: {{path: {model}}}\n"
        "engine: {speculative: {draft_model_path: /kit-t-absent/draft}}\n"
        "data:\n  demo_fixtures: fx\n  sources:\n"
        f"    - {{name: a, adapter: prompt_column, dataset: json, data_files: [{there}, gone.jsonl]}}\n"
        f"    - {{name: b, adapter: prompt_column, dataset: parquet, data_files: [{tmp_path}/b.parquet]}}\n"
        "    - {name: c, adapter: prompt_column, dataset: json, data_files: ['shards/*.jsonl']}\n"
        "    - {name: d, adapter: hermes_fc, dataset: json,"
        " data_files: [fx/hermes_fc.jsonl, fx/hermes.jsonl]}\n"
        "    - {name: e, adapter: prompt_column, dataset: org/hub-set}\n",
    )
    with pytest.raises(ParamsError) as e:
        load_params(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: paths that are not where they should be:")
    expected = {
        "model.path": f"{model} does not exist: correct the path, or set model.demo: true",
        "engine.speculative.draft_model_path": "/kit-t-absent/draft does not exist",
        "data.sources[0].data_files[1]": f"{tmp_path.resolve() / 'gone.jsonl'} does not exist ('gone.jsonl'",
        "data.sources[1].data_files[0]": f"{tmp_path / 'b.parquet'} does not exist",
        "data.sources[2].data_files[0]": f"the pattern {tmp_path.resolve()}/shards/*.jsonl matches no file",
        "data.sources[3].data_files[1]": f"{tmp_path.resolve() / 'fx' / 'hermes.jsonl'} does not exist, and "
        "data.demo_fixtures writes only agentinstruct.jsonl, codefeedback.jsonl, hermes_fc.jsonl,",
    }
    for key, text in expected.items():
        assert f"{key}: {text}" in msg, key
    assert msg.count("\n  - ") == len(expected)  # the existing file, the fixture to write, the Hub set: fine
    assert not (tmp_path / "fx").exists() and not (tmp_path / "models").exists()  # nothing built

    model.mkdir(parents=True)
    pd.DataFrame({"prompt": ["hi"]}).to_parquet(tmp_path / "b.parquet")
    (tmp_path / "gone.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "0.jsonl").write_text('{"prompt": "hi"}\n')
    text = f.read_text().replace("/kit-t-absent/draft", str(model))
    text = text.replace(", fx/hermes.jsonl", "")
    p = load_params(write(tmp_path, text))
    assert [s.name for s in p.data.sources] == ["a", "b", "c", "d", "e"]
    assert set(write_fixtures(p.data.demo_fixtures)) == set(SOURCES)  # what the fixture check names


def test_a_saved_params_file_opens_when_its_inputs_have_moved(tmp_path):
    """A run folder's params.yaml is read back (views, export, JupyterLab) after the data moved."""
    data = tmp_path / "a.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    (tmp_path / "m").mkdir()
    f = write(tmp_path, f"model: {{path: m}}\ndata: {{sources: [{{name: a, adapter: prompt_column, "
              f"dataset: json, data_files: [{data}]}}]}}\n")  # fmt: skip
    saved = tmp_path / "params.yaml"
    saved.write_text(dump_params(load_params(f)))
    data.unlink()
    with pytest.raises(ParamsError, match="a.jsonl does not exist"):
        load_params(saved)
    assert saved_params(saved).data.sources[0].data_files == [data]


def test_a_demo_model_outside_the_checkout_says_where_and_why_before_training(tmp_path, monkeypatch, caplog):
    from kit import stages
    from kit.demo.model import CHECKOUT_MODEL, is_demo_model

    f = write(tmp_path, "output_dir: out\nmodel: {path: cache/model, demo: true}\n")
    trained = []
    monkeypatch.setattr(stages, "ensure_demo_model", lambda path: trained.append((path, caplog.messages[:])))
    with caplog.at_level("INFO", logger="kit"):
        stages.prepare(load_params(f), save=False)
    ((path, said_before),) = trained
    assert path == tmp_path.resolve() / "cache" / "model"
    (line,) = [m for m in said_before if "demo model" in m]
    assert line.startswith(f"building the demo model at {path} (model.demo: true and none there yet;")
    assert f"model.path of {f.resolve()} points outside this checkout's {CHECKOUT_MODEL}" in line
    assert ("point model.path there to skip this build" in line) == is_demo_model(CHECKOUT_MODEL)
    assert CHECKOUT_MODEL == REPO / ".cache" / "demo" / "model"
