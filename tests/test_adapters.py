"""Adapters: each seed source's real schema to chat messages, generic schemas, schema errors."""

from __future__ import annotations

import json

import datasets
import pytest

from kit.demo.fixture_text import AGENT_INSTRUCTIONS
from kit.demo.fixtures import SOURCES, write_fixtures
from kit.errors import DataError
from kit.prompts import adapter_names, get_adapter
from kit.prompts.adapters import sharegpt_prompt, tools_in_one_place

N = 24


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    files = write_fixtures(tmp_path_factory.mktemp("fx"), rows_per_source=N)
    return {
        name: datasets.load_dataset("json", data_files=str(p), split="train").to_list()
        for name, p in files.items()
    }


def test_registry_names() -> None:
    expected = {*SOURCES, "prompt_column", "openai_messages", "sharegpt"}
    assert expected <= set(adapter_names())
    with pytest.raises(DataError, match="unknown adapter 'nope'.*metamathqa"):
        get_adapter("nope")


@pytest.mark.parametrize("name", SOURCES)
def test_every_fixture_row_adapts(rows: dict[str, list[dict]], name: str) -> None:
    adapt = get_adapter(name)
    for i, row in enumerate(rows[name]):
        out = adapt(row, i, name)
        roles = [m["role"] for m in out.messages]
        assert set(roles) <= {"system", "user", "assistant", "tool"}
        assert roles[-1] != "assistant" and "user" in roles
        assert isinstance(json.loads(out.metadata), dict)


def test_infinity_maps_roles_and_cuts_last_assistant(rows: dict[str, list[dict]]) -> None:
    adapt = get_adapter("infinity_instruct")
    for i, row in enumerate(rows["infinity_instruct"]):
        turns = row["conversations"]
        out = adapt(row, i)
        assert out.source_row_id == str(row["id"])
        assert len(out.messages) == len(turns) - 1
        role_map = {"human": "user", "gpt": "assistant", "system": "system"}
        assert [m["role"] for m in out.messages] == [role_map[t["from"]] for t in turns[:-1]]
        assert [m["content"] for m in out.messages] == [t["value"] for t in turns[:-1]]
        meta = json.loads(out.metadata)
        assert meta["lang"] == row["langdetect"] and meta["reference"] == turns[-1]["value"]
    multi = [r for r in rows["infinity_instruct"] if len(r["conversations"]) >= 4]
    assert multi, "fixtures should hold multi-turn rows"


def without_listing(system: str) -> str:
    """The Hermes system prompt without its `<tools>` block of schemas, cut by hand."""
    before, _, rest = system.partition("<tools>\n")
    return (before + rest.partition("\n</tools>")[2]).strip()


def test_hermes_keeps_system_prompt_without_its_tool_listing_and_tools(rows: dict[str, list[dict]]) -> None:
    adapt = get_adapter("hermes_fc")
    ends_with_tool = 0
    for i, row in enumerate(rows["hermes_fc"]):
        out = adapt(row, i)
        system = row["conversations"][0]["value"]
        assert out.messages[0] == {"role": "system", "content": without_listing(system)}
        assert "<tools></tools> XML tags" in out.messages[0]["content"] and "<tool_call>" in system
        assert out.messages[1:] == sharegpt_prompt(row["conversations"])[0][1:]
        assert json.loads(out.tools) == json.loads(row["tools"])
        assert out.source_row_id == row["id"]
        ends_with_tool += out.messages[-1]["role"] == "tool"
        assert json.loads(out.metadata)["reference"] == row["conversations"][-1]["value"]
    assert ends_with_tool > 0, "multi-turn rows end the prompt on the tool response"


def test_agentinstruct_keeps_in_context_example(rows: dict[str, list[dict]]) -> None:
    adapt = get_adapter("agentinstruct")
    for i, row in enumerate(rows["agentinstruct"]):
        out = adapt(row, i)
        assert out.messages[0] == {"role": "user", "content": AGENT_INSTRUCTIONS}
        assert out.messages[1]["role"] == "assistant"
        assert len(out.messages) == len(row["conversations"]) - 1


@pytest.mark.parametrize(
    "name, column, meta_key, meta_column",
    [
        ("webinstructsub", "question", "origin", "source"),
        ("codefeedback", "query", "lang", "lang"),
        ("metamathqa", "query", "type", "type"),
    ],
)
def test_single_text_sources(
    rows: dict[str, list[dict]], name: str, column: str, meta_key: str, meta_column: str
) -> None:
    adapt = get_adapter(name)
    for i, row in enumerate(rows[name]):
        out = adapt(row, i)
        assert out.messages == [{"role": "user", "content": row[column]}]
        assert out.tools is None and out.source_row_id == str(i)
        assert json.loads(out.metadata)[meta_key] == row[meta_column]


def test_generic_adapters() -> None:
    p = get_adapter("prompt_column")({"prompt": "Hi there", "system": "Be brief.", "category": "chat"}, 3)
    assert p.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert p.source_row_id == "3" and json.loads(p.metadata) == {"category": "chat"}
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    o = get_adapter("openai_messages")({"id": "x7", "messages": msgs, "tools": tools}, 0)
    assert o.messages == msgs[:4] and json.loads(o.tools) == tools and o.source_row_id == "x7"
    s = get_adapter("sharegpt")(
        {"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]}, 5
    )
    assert s.messages == [{"role": "user", "content": "Q"}] and json.loads(s.metadata)["reference"] == "A"


def test_schema_mismatch_names_source_expected_and_found() -> None:
    with pytest.raises(DataError) as err:
        get_adapter("hermes_fc").check_columns("fc", ["id", "conversations", "category"])
    text = str(err.value)
    assert "'fc'" in text and "hermes_fc" in text
    assert "expects columns [conversations, tools]" in text and "[id, conversations, category]" in text


@pytest.mark.parametrize(
    "turns, message",
    [
        ([{"from": "human"}], "expected a turn with keys"),
        ([{"from": "robot", "value": "hi"}], "unknown role 'robot'"),
        ([{"from": "gpt", "value": "only an answer"}], "no user turn"),
        ([], "non-empty list"),
        ("not a list", "non-empty list"),
    ],
)
def test_broken_conversation_is_a_data_error(turns: object, message: str) -> None:
    with pytest.raises(DataError, match=message) as err:
        get_adapter("sharegpt")({"conversations": turns}, 9, "my_source")
    assert "source 'my_source' row 9" in str(err.value)


def test_bad_tools_json_is_a_data_error() -> None:
    row = {"id": "a", "conversations": [{"from": "human", "value": "Q"}], "tools": "{not json"}
    with pytest.raises(DataError, match="tools is not valid JSON"):
        get_adapter("hermes_fc")(row, 0, "fc")


def test_the_chat_template_renders_each_tool_schema_once(rows: dict[str, list[dict]], demo_model) -> None:
    """The engine's prompt: the demo model's chat template (Qwen3's tool block) over what the adapter
    sends; the source's system prompt as it was would list every schema a second time."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model)
    for i, row in enumerate(rows["hermes_fc"]):
        out, tools = get_adapter("hermes_fc")(row, i), json.loads(row["tools"])
        as_sent = tok.apply_chat_template(
            out.messages, tools=tools, tokenize=False, add_generation_prompt=True
        )
        as_source = sharegpt_prompt(row["conversations"])[0]
        before = tok.apply_chat_template(as_source, tools=tools, tokenize=False, add_generation_prompt=True)
        for tool in tools:
            schema = json.dumps(tool["function"]["parameters"])
            assert as_sent.count(schema) == 1 and before.count(schema) == 2, tool["function"]["name"]


def test_tools_in_one_place_leaves_rows_without_tools_and_other_system_text() -> None:
    listing = 'Use them well.\n<tools>\n[{"type": "function"}]\n</tools>\nAnswer in French.'
    msgs = [{"role": "system", "content": listing}, {"role": "user", "content": "<tools>x</tools>"}]
    assert tools_in_one_place(msgs, None) == msgs  # no tools passed: the listing is the only one
    kept = tools_in_one_place(msgs, '[{"type": "function"}]')
    assert kept == [{"role": "system", "content": "Use them well.\n\nAnswer in French."}, msgs[1]]
    only = [{"role": "system", "content": "<tools>[1]</tools>"}, msgs[1]]
    assert tools_in_one_place(only, "[1]") == [msgs[1]]  # a system prompt that was only the listing
