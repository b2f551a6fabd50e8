"""OpenAI batch files in (`adapter: openai_batch`) and out (`kit export --format openai_batch`).

In: the lines of a real batch file through the real plan (datasets' text loader): `custom_id` kept as
the row's id, a malformed line named by its file and number and every other line kept, what the kit
cannot send refused, a custom_id on two lines stopping the plan with both named. Out: every input line
answered once, rows as chat completions and the rest as errors, read back by the `openai` package's
own types. The round trip through a real engine (the demo model on transformers serve) is the slow
test at the end: each line's own sampling sent and recorded, a changed line refused on resume, a
setting the engine refuses named by its line before any request.
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


OWN_BUDGET = 3  # max_tokens of line q-0 (the others ask for 16)


def batch_file(fixture_data: Path, out: Path, n: int = 8) -> list[str]:
    """A batch file of the fixture's MetaMathQA questions, one line not JSON and one asking for a
    stream; the custom_ids of the good lines. Line q-0 asks for its own budget and seed."""
    queries = [json.loads(line)["query"] for line in (fixture_data / "metamathqa.jsonl").open()][:n]
    lines = [request(f"q-{i}", q, max_tokens=16, temperature=0.7) for i, q in enumerate(queries)]
    lines[0] = request("q-0", queries[0], max_completion_tokens=OWN_BUDGET, temperature=0.0, seed=7)
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
    prompts = {p["id"]: p for p in pq.read_table(tmp_path / "prompts.parquet").to_pylist()}
    assert sorted(prompts) == sorted(ids)  # the custom_id is the row's id; nothing else lost
    assert all(p["source_row_id"] == i for i, p in prompts.items())
    meta = json.loads(prompts["q-1"]["metadata"])
    assert meta["body_sampling"] == {"max_tokens": 16, "temperature": 0.7} and meta["body_model"] == "any"
    assert meta["line"] == "in.jsonl line 2"
    own = json.loads(prompts["q-0"]["metadata"])["body_sampling"]  # max_completion_tokens read as max_tokens
    assert own == {"max_tokens": OWN_BUDGET, "temperature": 0.0, "seed": 7}
    details = result.dropped_rows["detail"].tolist()
    assert any(f"in.jsonl line {BAD_LINE}: not valid JSON" in d for d in details)
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
        (request("a", "x", logit_bias={"1": 5}), "body.logit_bias: not a field the kit sends"),
    ],
)
def test_what_the_kit_cannot_send_is_refused(line: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        parse_line(line)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"temperature": 3}, "body.temperature = 3: input should be less than or equal to 2"),
        ({"top_p": 0}, "body.top_p = 0: input should be greater than 0"),
        ({"max_tokens": 0}, "body.max_tokens = 0: input should be greater than or equal to 1"),
        ({"max_tokens": 8, "max_completion_tokens": 9}, "differ: keep one"),
        ({"stop": [1]}, "body.stop = "),
    ],
)
def test_sampling_out_of_range_is_refused_with_the_file_and_line(tmp_path, body, message) -> None:
    (tmp_path / "a.jsonl").write_text(request("a-0", "hello") + "\n" + request("a-1", "hi", **body) + "\n")
    (tmp_path / "b.jsonl").write_text(request("b-0", "what is two and two") + "\n")
    source = {
        **batch_source(tmp_path / "a.jsonl"),
        "data_files": [str(tmp_path / f) for f in ("a.jsonl", "b.jsonl")],
    }
    data = DataParams(sources=[source])
    result = build_plan(data, None, tmp_path / "p.parquet", tmp_path / "plan.json", progress=False)
    assert sorted(pq.read_table(tmp_path / "p.parquet").column("id").to_pylist()) == ["a-0", "b-0"]
    (detail,) = result.dropped_rows["detail"].tolist()
    assert "a.jsonl line 2: " in detail and message in detail, detail


def test_a_custom_id_on_two_lines_stops_the_plan_naming_both(tmp_path) -> None:
    lines = [request("x", "one"), request("y", "two"), request("x", "three")]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    data = DataParams(sources=[batch_source(tmp_path / "in.jsonl")])
    with pytest.raises(
        DataError, match=r"custom_id 'x' is on two lines, in.jsonl line 1 and in.jsonl line 3"
    ):
        build_plan(data, None, tmp_path / "p.parquet", tmp_path / "plan.json", progress=False)


def test_a_custom_id_in_two_sources_stops_the_plan_naming_both(tmp_path) -> None:
    (tmp_path / "a.jsonl").write_text(request("same", "one") + "\n")
    (tmp_path / "b.jsonl").write_text(request("other", "two") + "\n" + request("same", "three") + "\n")
    data = DataParams(sources=[{**batch_source(tmp_path / n), "name": n[0]} for n in ("a.jsonl", "b.jsonl")])
    with pytest.raises(
        DataError, match=r"'same' is on two prompts, source 'a' a.jsonl line 1 and source 'b' b.jsonl line 2"
    ):
        build_plan(data, None, tmp_path / "p.parquet", tmp_path / "plan.json", progress=False)


def test_ids_of_their_own_beside_hash_ids_in_a_spilled_plan(fixture_data, tmp_path, monkeypatch) -> None:
    """Past the spill buffer the rows go to bucket files: custom_ids (not hex) beside another source's
    hash ids, every row once, the hash ids first in id order."""
    import kit.prompts.plan as plan

    monkeypatch.setattr(plan, "SPILL_BUFFER_ROWS", 4)
    lines = [request(f"Req-{i:03d}", f"question number {i}") for i in range(40)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    math = {
        "name": "metamathqa",
        "adapter": "metamathqa",
        "dataset": "json",
        "count": 10,
        "data_files": [str(fixture_data / "metamathqa.jsonl")],
    }
    data = DataParams(sources=[batch_source(tmp_path / "in.jsonl"), math])
    build_plan(data, None, tmp_path / "p.parquet", tmp_path / "plan.json", progress=False)
    table = pq.read_table(tmp_path / "p.parquet")
    ids, sources = table.column("id").to_pylist(), table.column("source").to_pylist()
    assert sorted(i for i, s in zip(ids, sources, strict=True) if s == "batch") == [
        f"Req-{i:03d}" for i in range(40)
    ]
    hashed = [i for i, s in zip(ids, sources, strict=True) if s == "metamathqa"]
    assert len(hashed) == 10 and hashed == sorted(hashed) and ids[:10] == hashed


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


def planned_run(tmp_path: Path) -> RunFolder:
    """A run folder whose params read `tmp_path/in.jsonl` as a batch source, its prompts planned."""
    folder = RunFolder(tmp_path / "run").ensure()
    params = RunParams(
        run="run",
        model={"path": str(tmp_path / "m")},
        data={"sources": [batch_source(tmp_path / "in.jsonl")]},
    )
    folder.params.write_text(dump_params(params))
    build_plan(params.data, None, folder.prompts, folder.plan, progress=False)
    return folder


def test_every_input_line_is_answered_once(fixture_data, tmp_path) -> None:
    ids = batch_file(fixture_data, tmp_path / "in.jsonl")
    folder = planned_run(tmp_path)
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
    # each line's own sampling was sent and is recorded in its row, under its custom_id
    rows = {r["id"]: r for r in pq.read_table(run / "generations").to_pylist()}
    assert sorted(rows) == sorted(ids)
    own, other = json.loads(rows["q-0"]["sampling"]), json.loads(rows["q-1"]["sampling"])
    assert (own["max_tokens"], own["temperature"], own["seed"]) == (OWN_BUDGET, 0.0, 7)
    assert (other["max_tokens"], other["temperature"], other["seed"]) == (16, 0.7, 0)  # the params' seed
    assert 0 < rows["q-0"]["completion_tokens"] <= OWN_BUDGET < rows["q-1"]["completion_tokens"]
    assert rows["q-0"]["sampling_hash"] != rows["q-1"]["sampling_hash"]
    assert answers["q-0"].usage.completion_tokens <= OWN_BUDGET
    # a line changed since its row was made: the resume is refused, naming the file
    text = (tmp_path / "in.jsonl").read_text()
    (tmp_path / "in.jsonl").write_text(text.replace('"temperature": 0.7', '"temperature": 0.9', 1))
    done = subprocess.run([*kit, "generate", str(params)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "holds rows made from other contents of" in done.stderr and "in.jsonl" in done.stderr
    # a line's setting the engine refuses (transformers serve ignores presence_penalty): named by
    # its line once planned, before any server starts
    (tmp_path / "in.jsonl").write_text(text.replace('"temperature": 0.7', '"presence_penalty": 0.5', 1))
    raw["run"] = "refused"
    params.write_text(__import__("yaml").safe_dump(raw))
    done = subprocess.run([*kit, "generate", str(params)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "in.jsonl line 2: body.presence_penalty: transformers serve ignores it" in done.stderr
    assert not list((Path(raw["output_dir"]) / "refused" / "logs").glob("server-*"))  # nothing sent


def test_the_same_prompt_on_two_lines_is_two_requests(tmp_path) -> None:
    """data.dedup drops repeated prompts of datasets; a batch file's lines are requests, each answered."""
    lines = [request("a", "the same question", seed=1), request("b", "the same question", seed=2)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    data = DataParams(sources=[batch_source(tmp_path / "in.jsonl")])
    build_plan(data, None, tmp_path / "p.parquet", tmp_path / "plan.json", progress=False)
    assert sorted(pq.read_table(tmp_path / "p.parquet").column("id").to_pylist()) == ["a", "b"]


def test_a_custom_id_that_is_another_lines_sample_id_is_refused_when_n_is_above_1(
    tmp_path, monkeypatch
) -> None:
    """With generate.sampling.n = 2 sample 1 of line 'x' is row 'x.1': a line whose own custom_id
    is 'x.1' would share its row id (one answer passing for the other), so the plan is refused,
    naming both; with n = 1 (or no such pair) the same ids plan."""
    from kit.prompts import prompt_set
    from kit.prompts.prompt_set import ensure_plan, sample_id_clashes

    def no_tokenizer(data, _model_dir, prompts, plan):  # no model here: no prompt token filter
        return build_plan(data, None, prompts, plan, progress=False)

    monkeypatch.setattr(prompt_set, "build_plan", no_tokenizer)
    lines = [request("x", "one"), request("x.1", "two"), request("v1.2", "three"), request("y.01", "four")]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")

    def params(n: int) -> RunParams:
        return RunParams(
            run="run",
            model={"path": str(tmp_path / "m")},
            data={"sources": [batch_source(tmp_path / "in.jsonl")]},
            generate={"sampling": {"n": n}},
        )

    folder = RunFolder(tmp_path / "run").ensure()
    with pytest.raises(
        DataError, match=r"n = 2 .* 'x.1' is also sample 1 of 'x'.*custom_id that does not end"
    ):
        ensure_plan(params(2), folder)
    assert ensure_plan(params(1), folder) == folder.prompts  # the plan itself is fine
    with pytest.raises(DataError, match=r"1 prompt id\(s\)"):  # a reused plan is checked too
        ensure_plan(params(2), folder)
    ids = pa.array(["x", "x.1", "x.2", "a.b", "a.b.1", "y.01", "y", "z.3"])
    assert sample_id_clashes(ids, 3) == [("x.1", "x", 1), ("x.2", "x", 2), ("a.b.1", "a.b", 1)]
    assert sample_id_clashes(ids, 1) == []


def test_a_dotted_custom_id_that_failed_is_answered_with_its_failure(tmp_path) -> None:
    """A failure record names its prompt and sample (stage 3 writes prompt_id and sample_index): a
    custom_id with a dot ('req.7') is not read as sample 7 of 'req'. The failed line gets its error
    line, the messages export keeps its prompt in `rejected`; a line repeated after the plan is
    answered as a repeat of the first."""
    import datasets

    lines = [request("req.7", "one"), request("ok.1", "two"), request("plain", "three")]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    folder = planned_run(tmp_path)
    prompts = {p["id"]: p for p in pq.read_table(folder.prompts).to_pylist()}
    rows = [made_row(prompts[i], f"answer {i}") for i in ("ok.1", "plain")]
    pq.write_table(pa.Table.from_pylist(rows, schema=NEW_SCHEMA), folder.generations / "part-00000.parquet")
    record = {"id": "req.7", "prompt_id": "req.7", "sample_index": 0, "source": "batch"}
    folder.failures.write_text(json.dumps({**record, "reason": "http_500", "error": "boom"}) + "\n")
    folder.shard(0, 1).write_manifest(Manifest(run="run", complete=True, status="complete"))
    with (tmp_path / "in.jsonl").open("a") as f:  # the file changed after its plan
        f.write(request("plain", "again") + "\n")
    export_run(folder.root, ExportOptions(to=tmp_path / "out", fmt="openai_batch"), progress=False)
    lines = [json.loads(t) for t in (tmp_path / "out" / "output.jsonl").read_text().splitlines()]
    assert sorted(t["custom_id"] for t in lines if t["error"] is None) == ["ok.1", "plain"]
    errors = [(t["custom_id"], BatchError.model_validate(t["error"])) for t in lines if t["error"]]
    assert [(c, e.code) for c, e in errors] == [("req.7", "http_500"), ("plain", "duplicate_custom_id")]
    assert "the request failed: boom" in errors[0][1].message
    assert errors[1][1].message == "in.jsonl line 4: custom_id repeats in.jsonl line 3"
    result = export_run(folder.root, ExportOptions(to=tmp_path / "data"), progress=False)
    rejected = datasets.load_dataset(str(tmp_path / "data"))["rejected"]
    assert rejected["id"] == ["req.7"] and rejected["drop_reason"] == ["failed"]
    assert result.reasons["failed"] == 1


def test_the_batch_records_name_the_fields_the_adapter_reads() -> None:
    """`BatchBody` names every body field a line may hold (`KNOWN`: the rest are refused), and
    `LineSampling` the sampling fields a line keeps (max_completion_tokens read as max_tokens)."""
    from kit.prompts.openai_batch import KNOWN, SAMPLING_FIELDS
    from kit.prompts.records import BatchBody, LineSampling

    assert set(BatchBody.__annotations__) == KNOWN
    assert set(LineSampling.__annotations__) == set(SAMPLING_FIELDS) - {"max_completion_tokens"}
