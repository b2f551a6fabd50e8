"""The embedded demo model speaks Qwen3's shapes: think blocks, Hermes tool calls, its chat template.

Fast tests check the tokenizer and the chat template; a sampling test checks that the trained
model writes well-formed `<think>` blocks and `<tool_call>` JSON on the fixture prompts (seeded);
the slow test starts the real vLLM with Qwen3's reasoning parser and the Hermes tool-call parser,
and with the draft model as a speculative drafter, and checks what comes back.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest

from kit.demo.tokenizer import MARKUP_TOKENS
from kit.prompts import fixture_text as text
from kit.prompts.adapters import get_adapter
from kit.prompts.fixtures import is_long, write_fixtures

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
THINK_BLOCK = re.compile(r"<think>\n(.*?)\n</think>\n\n(.+)", re.S)
TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
TOOLS = [tool for _, tool in text.TOOLS[:3]]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is 2 plus 3?"}


@pytest.fixture(scope="module")
def tokenizer(demo_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model)


def render(tokenizer, messages, **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


# --- tokenizer and chat template ------------------------------------------------------------------


@pytest.mark.parametrize("tag", MARKUP_TOKENS)
def test_markup_tags_are_single_tokens_that_stay_in_decoded_text(tokenizer, tag) -> None:
    ids = tokenizer(f"a{tag}b", add_special_tokens=False)["input_ids"]
    tag_id = tokenizer.convert_tokens_to_ids(tag)
    assert tag_id in ids and tag_id != tokenizer.unk_token_id
    assert tokenizer.decode([tag_id]) == tag
    assert tokenizer.decode(ids, skip_special_tokens=True) == f"a{tag}b"
    assert tag_id not in tokenizer.all_special_ids


def test_template_lists_tools_in_the_system_turn(tokenizer) -> None:
    prompt = render(tokenizer, [SYSTEM, USER], tools=TOOLS)
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n")
    assert "<tools>\n" + "\n".join(json.dumps(t) for t in TOOLS) + "\n</tools>" in system
    assert "return a json object with function name and arguments within <tool_call></tool_call>" in system
    assert prompt.endswith("<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n<|im_start|>assistant\n")
    no_system = render(tokenizer, [USER], tools=TOOLS)
    assert no_system.startswith("<|im_start|>system\n# Tools\n")


def test_template_thinking_is_on_by_default_and_off_prefills_an_empty_block(tokenizer) -> None:
    default = render(tokenizer, [USER])
    assert default == "<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n<|im_start|>assistant\n"
    assert render(tokenizer, [USER], enable_thinking=True) == default
    assert render(tokenizer, [USER], enable_thinking=False) == default + "<think>\n\n</think>\n\n"


def test_template_writes_tool_calls_and_tool_responses_as_qwen3_does(tokenizer) -> None:
    call = {"name": "get_current_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}
    messages = [
        USER,
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
        {"role": "tool", "content": '{"temp": 3}'},
        {"role": "tool", "content": '{"temp": 4}'},
    ]
    prompt = render(tokenizer, messages, tools=TOOLS)
    assert f"<|im_start|>assistant\n<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>\n" in prompt
    responses = "\n".join(f'<tool_response>\n{{"temp": {t}}}\n</tool_response>' for t in (3, 4))
    assert prompt.endswith(f"<|im_start|>user\n{responses}<|im_end|>\n<|im_start|>assistant\n")


def test_template_keeps_only_the_answer_of_an_earlier_turn(tokenizer) -> None:
    messages = [USER, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n5"}, USER]
    assert "<|im_start|>assistant\n5<|im_end|>\n" in render(tokenizer, messages)


# --- the trained model ----------------------------------------------------------------------------


def fixture_prompts(tmp_path: Path, source: str, n: int) -> list[tuple[list[dict], list[dict] | None]]:
    """The first `n` ordinary (not very long) prompts of one fixture source, with their tools."""
    path = write_fixtures(tmp_path, rows_per_source=2 * n)[source]
    adapter = get_adapter(source)
    rows = [adapter(json.loads(line), i) for i, line in enumerate(path.open()) if not is_long(i)]
    return [(r.messages, json.loads(r.tools) if r.tools else None) for r in rows[:n]]


def sample(model, tokenizer, prompts, thinking: bool, max_new_tokens: int = 120) -> list[str]:
    """Seeded sampling at temperature 0.7, in one left-padded batch."""
    import torch

    texts = [render(tokenizer, m, tools=t, enable_thinking=thinking) for m, t in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=True, temperature=0.7, top_p=0.95)
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def tool_call_is_valid(answer: str, tools: list[dict]) -> bool:
    """A `<tool_call>` whose JSON names one of `tools` and has an arguments object."""
    calls = TOOL_CALL.findall(answer)
    try:
        call = json.loads(calls[0]) if calls and answer.startswith("<tool_call>") else None
    except json.JSONDecodeError:
        return False
    names = {t["function"]["name"] for t in tools}
    return isinstance(call, dict) and call.get("name") in names and isinstance(call.get("arguments"), dict)


@pytest.fixture(scope="module")
def model(demo_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(demo_model).eval()


def test_thinking_on_opens_with_a_closed_think_block(model, tokenizer, tmp_path) -> None:
    prompts = fixture_prompts(tmp_path, "metamathqa", 6) + fixture_prompts(tmp_path, "infinity_instruct", 6)
    outs = sample(model, tokenizer, prompts, thinking=True)
    blocks = [THINK_BLOCK.fullmatch(o) for o in outs]
    assert sum(b is not None and "<think>" not in b.group(2) for b in blocks) >= 9, outs
    math_reasoning = [len(b.group(1)) for b in blocks[:6] if b]
    assert math_reasoning and min(math_reasoning) > 40, outs[:6]


def test_thinking_off_answers_without_think_tags(model, tokenizer, tmp_path) -> None:
    prompts = fixture_prompts(tmp_path, "metamathqa", 6) + fixture_prompts(tmp_path, "codefeedback", 6)
    outs = sample(model, tokenizer, prompts, thinking=False)
    assert sum("<think>" not in o and "</think>" not in o and o.strip() for o in outs) >= 10, outs


@pytest.mark.parametrize("thinking", [True, False])
def test_hermes_prompts_get_tool_calls_naming_a_listed_tool(model, tokenizer, tmp_path, thinking) -> None:
    prompts = [p for p in fixture_prompts(tmp_path, "hermes_fc", 16) if p[0][-1]["role"] == "user"][:10]
    outs = sample(model, tokenizer, prompts, thinking=thinking, max_new_tokens=160)
    answers = [THINK_BLOCK.fullmatch(o) for o in outs] if thinking else outs
    answers = [(a.group(2) if a else "") if thinking else a for a in answers]
    valid = [tool_call_is_valid(a, tools) for a, (_, tools) in zip(answers, prompts, strict=True)]
    assert sum(valid) >= 7, outs


def test_draft_model_is_a_smaller_sibling_with_the_same_vocabulary(demo_model, demo_draft_model) -> None:
    from transformers import AutoConfig, AutoTokenizer

    target, draft = AutoConfig.from_pretrained(demo_model), AutoConfig.from_pretrained(demo_draft_model)
    assert draft.num_hidden_layers < target.num_hidden_layers
    assert draft.vocab_size == target.vocab_size and draft.model_type == target.model_type
    assert (
        AutoTokenizer.from_pretrained(demo_draft_model).get_vocab()
        == AutoTokenizer.from_pretrained(demo_model).get_vocab()
    )


# --- the real vLLM, with Qwen3's reasoning parser, the Hermes tool parser and the draft model -----

QWEN3_PARSERS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]


def vllm_or_skip() -> Path:
    if VLLM_PYTHON.exists():
        return VLLM_PYTHON
    if os.environ.get("KIT_REQUIRE_ENGINES") == "1":
        pytest.fail(f"KIT_REQUIRE_ENGINES=1 but {VLLM_PYTHON} is missing: run `make engine-vllm`")
    pytest.skip(f"no vLLM environment at {VLLM_PYTHON} (`make engine-vllm` builds it)")


@pytest.fixture(scope="module")
def vllm_with_parsers(demo_model, demo_draft_model, tmp_path_factory):
    """vLLM serving the demo model with both parsers on and the draft model as its drafter."""
    from kit.engines import start_server
    from kit.params import RunParams

    python = vllm_or_skip()
    spec = {"method": "draft_model", "model": str(demo_draft_model), "num_speculative_tokens": 2}
    engine = {
        "flavor": "vllm",
        "python": str(python),
        "context_length": 2048,
        "startup_timeout_s": 600,
        "extra_args": ["--dtype", "float32", "--speculative-config", json.dumps(spec), *QWEN3_PARSERS],
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
    }
    params = RunParams.model_validate({"run": "t", "model": {"path": str(demo_model)}, "engine": engine})
    with start_server(params, tmp_path_factory.mktemp("vllm-logs")) as server:
        yield server


def chat(server, messages, tools=None, **fields) -> dict:
    """One greedy chat completion (vLLM 0.32's CPU speculation is lossless only when greedy)."""
    body = {"model": str(server.params.model.path), "messages": messages, "max_tokens": 160, "temperature": 0}
    body |= {"tools": tools} if tools else {}
    r = httpx.post(f"{server.base_url}/v1/chat/completions", json=body | fields, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def spec_counter(server, name: str) -> float:
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(f"vllm:{name}{{"))


@pytest.mark.slow
def test_vllm_parsers_split_reasoning_and_tool_calls(vllm_with_parsers, tmp_path) -> None:
    server = vllm_with_parsers
    math, _ = fixture_prompts(tmp_path, "metamathqa", 1)[0]
    thought = chat(server, math)
    assert thought["message"]["reasoning"].strip() and thought["message"]["content"].strip(), thought
    assert "<think>" not in thought["message"]["content"] + thought["message"]["reasoning"]

    plain = chat(server, math, chat_template_kwargs={"enable_thinking": False})
    assert plain["message"]["reasoning"] is None and plain["message"]["content"].strip(), plain
    assert "think>" not in plain["message"]["content"]

    hermes = [p for p in fixture_prompts(tmp_path, "hermes_fc", 8) if p[0][-1]["role"] == "user"][:4]
    calls = [chat(server, messages, tools) for messages, tools in hermes]
    names = [{t["function"]["name"] for t in tools} for _, tools in hermes]
    parsed = [
        c["message"]["tool_calls"][0]["function"]
        for c in calls
        if c["finish_reason"] == "tool_calls" and c["message"]["tool_calls"]
    ]
    assert len(parsed) >= 3, calls
    assert all(isinstance(json.loads(f["arguments"]), dict) for f in parsed), parsed
    assert sum(f["name"] in n for f, n in zip(parsed, names, strict=False)) >= 3, parsed
    assert all(c["message"]["reasoning"] for c in calls), calls


@pytest.mark.slow
def test_vllm_accepts_drafts_from_the_draft_model(vllm_with_parsers, tmp_path) -> None:
    server = vllm_with_parsers
    drafts = spec_counter(server, "spec_decode_num_drafts_total")
    accepted = spec_counter(server, "spec_decode_num_accepted_tokens_total")
    for messages, _ in fixture_prompts(tmp_path, "infinity_instruct", 3):
        chat(server, messages, max_tokens=48)
    assert spec_counter(server, "spec_decode_num_drafts_total") > drafts
    assert spec_counter(server, "spec_decode_num_accepted_tokens_total") > accepted
