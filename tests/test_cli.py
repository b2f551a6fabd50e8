"""The `kit` command from the shell: bad input ends with one clear message, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KIT = [sys.executable, "-m", "kit.cli"]
REPO = Path(__file__).resolve().parent.parent


def kit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=300)


def assert_clear_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    for n in needles:
        assert n in done.stderr, done.stderr


def test_help_lists_every_command():
    out = kit("--help").stdout
    for cmd in (
        "run",
        "probe",
        "decide",
        "generate",
        "analyse",
        "report",
        "compare",
        "demo-assets",
        "adapters",
    ):
        assert cmd in out


def test_usage_error_is_a_message():
    done = kit("generate")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "Missing" in done.stderr


def test_missing_params_file():
    assert_clear_error(kit("generate", "nope.yaml"), "params file not found: nope.yaml")


def test_unknown_key(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text("model: {path: m}\ngenerate: {concurency: 8}\n")
    assert_clear_error(kit("generate", str(f)), str(f), "generate.concurency", "concurrency")


def test_model_path_missing(tmp_path: Path):
    f = tmp_path / "p.yaml"
    f.write_text("model: {path: no-such-model}\n")
    assert_clear_error(kit("generate", str(f)), "no-such-model does not exist", "model.demo: true")


def test_missing_inputs_stop_the_command_before_the_demo_model_is_trained(tmp_path: Path):
    """A copied demo params file with a wrong data path: one message naming every missing input, exit
    2, and no demo model trained where its paths point (the copy once trained one)."""
    f = tmp_path / "p.yaml"
    f.write_text(
        "model: {path: cache/model, demo: true}\ndata: {sources: ["
        "{name: a, adapter: prompt_column, dataset: json, data_files: [a.jsonl]},"
        f"{{name: b, adapter: prompt_column, dataset: parquet, data_files: [{tmp_path / 'b.parquet'}]}}]}}\n"
    )
    done = kit("generate", str(f))
    assert_clear_error(
        done,
        f"{f}: paths that are not where they should be:",
        f"data.sources[0].data_files[0]: {tmp_path.resolve() / 'a.jsonl'} does not exist",
        f"data.sources[1].data_files[0]: {tmp_path / 'b.parquet'} does not exist",
    )
    assert "demo model" not in done.stderr and not (tmp_path / "cache").exists()


def test_model_path_not_a_model(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    f = tmp_path / "p.yaml"
    f.write_text("model: {path: empty}\n")
    assert_clear_error(kit("decide", str(f)), "has no config.json")


def test_report_of_missing_run(tmp_path: Path):
    done = kit("report", str(tmp_path / "no-run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr


@pytest.mark.slow
def test_bad_shard_spec(tmp_path: Path, write_params):
    assert_clear_error(kit("generate", str(write_params("s")), "--shard", "4/4"), "--shard 4/4")


def test_adapters_lists_the_six_sources():
    out = kit("adapters").stdout.split()
    for name in (
        "infinity_instruct",
        "webinstructsub",
        "codefeedback",
        "metamathqa",
        "hermes_fc",
        "agentinstruct",
    ):
        assert name in out


def test_compare_two_runs(tmp_path: Path):
    from test_analyse_fixture import build_run, generation_frame

    a = build_run(tmp_path / "plain")
    b = build_run(tmp_path / "mtp", frame=generation_frame().iloc[:10])
    done = kit("compare", str(a.root), str(b.root))
    assert done.returncode == 0, done.stderr
    rows_line = next(line for line in done.stdout.splitlines() if line.startswith("rows"))
    assert [float(x) for x in rows_line.split()[1:4]] == [20, 10, -10]
    assert list((b.root / "compare").glob("*.png"))
    assert_clear_error(kit("compare", str(a.root), str(tmp_path / "nope")), "is not a run folder")


def test_a_data_file_that_is_not_utf8_is_named(tmp_path: Path, write_params):
    """pyarrow reads such a file and the plan then dies on the first row with a UnicodeDecodeError."""
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"prompt": "café au lait"}\n{"prompt": "hello"}\n'.encode("latin-1"))
    source = {"name": "q", "adapter": "prompt_column", "dataset": "json", "data_files": [str(bad)]}
    done = kit("generate", str(write_params("latin1", data={"sources": [source]})))
    assert_clear_error(done, "latin1.jsonl is not UTF-8 text", "at byte 15", "iconv")


def test_an_output_dir_that_is_a_file_is_a_message(tmp_path: Path, write_params):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    done = kit("generate", str(write_params("blocked", output_dir=str(blocker))))
    assert_clear_error(done, f"{blocker} is a file, not a folder", "output_dir")


def test_version_names_the_package_and_the_checkout():
    from kit import __version__

    done = kit("--version")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert done.stdout.startswith(f"kit {__version__} (git {head}")


def test_help_reads_as_users_know_it_at_80_columns():
    """Usage `kit generate [OPTIONS] PARAMS`, flags without a `<bool>` beside them or a `--no-` twin,
    and every option's name whole in an 80-column terminal."""
    import typer.main

    from kit.cli import app

    group = typer.main.get_command(app)
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    for name, command in group.commands.items():
        done = subprocess.run([*KIT, name, "--help"], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        text = done.stdout
        assert "<bool>" not in text and "…" not in text and "--no-" not in text.replace("--no-browser", "")
        for option in (o for p in command.params for o in p.opts if o.startswith("--")):
            assert option in text, (name, option)
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        usage = next(line for line in text.splitlines() if "Usage:" in line)
        assert "{" not in usage, usage
        for p in arguments:
            assert (p.metavar if p.required else f"[{p.metavar}]") in usage, usage
    assert "Usage: python -m kit.cli generate [OPTIONS] PARAMS" in kit("generate", "--help").stdout


def test_report_files_are_readable_as_the_umask_says(tmp_path: Path):
    """`kit report` writes its pages through the atomic writer: mode 0666 less the umask, as any
    file the user writes (mkstemp alone made them 0600)."""
    import nbformat
    from test_analyse_fixture import build_run

    run = build_run(tmp_path / "run")
    run.notebooks.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("# Stage 4"))
    nbformat.write(nb, run.notebooks / "04_analyse_outputs.ipynb")
    for umask, mode in ((0o022, 0o644), (0o027, 0o640)):
        done = subprocess.run(
            [*KIT, "report", str(run.root)],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=lambda umask=umask: os.umask(umask),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        files = [p for p in (run.root / "report").rglob("*") if p.is_file()]
        assert files and {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: mode for p in files}


def test_analyse_reads_only_the_run_folder(tmp_path: Path):
    """A run copied from the GPU box is analysed where its engine and model are not (an H100 run's
    params name /opt/torch/.venv/bin/python3): stage 4 checks neither, stage 3 still names both."""
    f = tmp_path / "p.yaml"
    f.write_text(
        "model: {path: /no/such/model}\nengine: {flavor: sglang, python: /no/such/python}\noutput_dir: out\n"
    )
    done = kit("analyse", str(f))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "p" / "summary.json").is_file()
    stage3 = kit("generate", str(f))
    assert_clear_error(stage3, "model.path: /no/such/model", "engine.python: /no/such/python")


def test_kit_run_refuses_the_engines_own_switch_before_stage_2(tmp_path: Path, write_params):
    """Stage 3 would refuse it under the decision's arm: `kit run` says so before the sweep is spent."""
    spec = {"algorithm": "NGRAM", "num_steps": 3, "adaptive": True}
    path = write_params("switch", engine={"flavor": "vllm", "speculative": spec})
    done = kit("run", str(path))
    assert_clear_error(done, "engine.speculative.adaptive", "generate.use_decision: false")
    assert not (tmp_path / "outputs" / "switch" / "notebooks").exists()
