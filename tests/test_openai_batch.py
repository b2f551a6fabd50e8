"""OpenAI batch files in (`adapter: openai_batch`) and out (`kit export --format openai_batch`).

In: the lines of a real batch file through the real plan (datasets' text loader): `custom_id` kept as
the row's source id, a malformed line named by its number and every other line kept, what the kit
cannot send refused. Out: every input line answered once, rows as chat completions and the rest as
errors, read back by the `openai` package's own types. The round trip through a real engine (the
demo model on transformers serve) is the slow test at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures_outputs import NEW_SCHEMA
from openai.types import BatchError
from openai.types.chat import ChatCompletion
from test_export import made_row

from kit.artifacts import Manifest
from kit.errors import DataError
from kit.export import ExportOptions, export_run
from kit.params import DataParams, RunParams, dump_params
from kit.prompts.openai_batch import parse_line
from kit.prompts.plan import build_plan
from kit.runfolder import RunFolder

REPO = Path(__file__).resolve().parent.parent
BAD_LINE = 4  # 1-based line number of the line that is not JSON


def request(custom_id: str, content: str, **body: object) -> str:
    return json.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "any", "messages": [{"role": "user", "content": content}], **body},
        }
    )


def batch_file(fixture_data: Path, out: Path, n: int = 8) -> list[str]:
    """A batch file of the fixture's MetaMathQA questions, one line not JSON and one asking for a
    stream; the custom_ids of the good lines."""
    queries = [json.loads(line)["query"] for line in (fixture_data / "metamathqa.jsonl").open()][:n]
    lines = [request(f"q-{i}", q, max_tokens=16, temperature=0.7) for i, q in enumerate(queries)]
    lines.insert(BAD_LINE - 1, '{"custom_id": "broken", "method": ')
    lines.append(request("streamed", "hello there", stream=True))
    out.write_text("\n".join(lines) + "\n")
    return [f"q-{i}" for i in range(len(queries))]


def batch_source(path: Path) -> dict:
    return {"name": "batch", "adapter": "openai_batch", "dataset": "text", "data_files": [str(path)]}


def test_lines_keep_their_custom_id_and_a_bad_line_is_named(fixture_data, tmp_path, caplog) -> None:
    ids = batch_file(fixture_data, tmp_path / "in.jsonl")
    data = DataParams(sources=[batch_source(tmp_path / "in.jsonl")])
    result = build_plan(data, None, tmp_path / "prompts.parquet", tmp_path / "plan.json", progress=False)
    prompts = pq.read_table(tmp_path / "prompts.parquet").to_pylist()
    assert sorted(p["source_row_id"] for p in prompts) == sorted(ids)  # nothing else lost
    meta = json.loads(prompts[0]["metadata"])
    assert meta["body_sampling"] == {"max_tokens": 16, "temperature": 0.7} and meta["body_model"] == "any"
    details = result.dropped_rows["detail"].tolist()
    assert any(f"line {BAD_LINE}: not valid JSON" in d for d in details)
    assert any("body.stream = True: the kit cannot give streaming" in d for d in details)
    assert any(
        "2 line(s) of its file cannot be sent" in w and f"line {BAD_LINE}" in w for w in result.warnings
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1, 2]", "a JSON list, not a request object"),
        (json.dumps({"method": "POST", "body": {}}), "no custom_id"),
        (json.dumps({"custom_id": "a", "method": "GET", "body": {}}), "only POST"),
        (json.dumps({"custom_id": "a", "url": "/v1/embeddings", "body": {}}), "chat completions only"),
        (json.dumps({"custom_id": "a", "body": {"messages": []}}), "body has no messages"),
        (request("a", "x", n=2), "n > 1"),
        (request("a", "x", logprobs=True), "logprobs"),
    ],
)
def test_what_the_kit_cannot_send_is_refused(line: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        parse_line(line)


def test_neutral_values_and_text_parts_are_taken() -> None:
    line = parse_line(request("a", "x", stream=False, n=1))
    assert line["custom_id"] == "a"
    parts = json.dumps(
        {
            "custom_id": "b",
            "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        }
    )
    assert parse_line(parts)["body"]["messages"][0]["content"][0]["text"] == "hi"


def read_output(path: Path) -> tuple[dict[str, ChatCompletion], dict[str | None, BatchError]]:
    answers, errors = {}, {}
    for text in path.read_text().splitlines():
        line = json.loads(text)
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert line["custom_id"] not in answers and line["custom_id"] not in errors  # each line once
        if line["error"] is None:
            assert line["response"]["status_code"] == 200 and line["response"]["request_id"]
            answers[line["custom_id"]] = ChatCompletion.model_validate(line["response"]["body"])
        else:
            assert line["response"] is None
            errors[line["custom_id"]] = BatchError.model_validate(line["error"])
    return answers, errors


def test_every_input_line_is_answered_once(fixture_data, tmp_path) -> None:
    ids = batch_file(fixture_data, tmp_path / "in.jsonl")
    folder = RunFolder(tmp_path / "run").ensure()
    params = RunParams(
        run="run",
        model={"path": str(tmp_path / "m")},
        data={"sources": [batch_source(tmp_path / "in.jsonl")]},
    )
    folder.params.write_text(dump_params(params))
    build_plan(params.data, None, folder.prompts, folder.plan, progress=False)
    prompts = pq.read_table(folder.prompts).to_pylist()
    failed = prompts[0]
    rows = [made_row(p, f"The answer is {i}.") for i, p in enumerate(prompts[1:])]
    pq.write_table(pa.Table.from_pylist(rows, schema=NEW_SCHEMA), folder.generations / "part-00000.parquet")
    folder.failures.write_text(
        json.dumps({"id": failed["id"], "source": "batch", "reason": "http_500", "error": "boom"}) + "\n"
    )
    folder.shard(0, 1).write_manifest(Manifest(run="run", complete=True, status="complete"))
    result = export_run(folder.root, ExportOptions(to=tmp_path / "out", fmt="openai_batch"), progress=False)
    answers, errors = read_output(tmp_path / "out" / "output.jsonl")
    assert sorted(answers) == sorted(set(ids) - {failed["source_row_id"]})
    assert answers["q-1"].choices[0].message.content.startswith("The answer is")
    assert errors[failed["source_row_id"]].code == "http_500"
    assert f"in.jsonl line {BAD_LINE}: not valid JSON" in errors["broken"].message  # its id still read
    assert "streaming" in errors["streamed"].message
    assert result.splits == {"answered": len(ids) - 1, "errors": 3}


@pytest.mark.slow
def test_round_trip_through_the_demo_engine(fixture_data, write_params, tmp_path) -> None:
    ids = batch_file(fixture_data, tmp_path / "in.jsonl", n=6)
    params = write_params("batch", counts={})
    raw = __import__("yaml").safe_load(params.read_text())
    raw["data"]["sources"] = [batch_source(tmp_path / "in.jsonl")]
    params.write_text(__import__("yaml").safe_dump(raw))
    kit = [sys.executable, "-m", "kit.cli"]
    done = subprocess.run([*kit, "generate", str(params)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"line {BAD_LINE}" in done.stderr  # the plan's warning names the bad line
    run = Path(raw["output_dir"]) / "batch"
    out = tmp_path / "out"
    done = subprocess.run(
        [*kit, "export", str(run), "--to", str(out), "--format", "openai_batch"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers, errors = read_output(out / "output.jsonl")
    assert sorted(answers) == sorted(ids) and set(errors) == {"broken", "streamed"}
    for completion in answers.values():
        assert completion.choices[0].finish_reason in ("stop", "length")
        assert completion.usage is not None and completion.usage.completion_tokens > 0
