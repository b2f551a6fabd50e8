"""The embedded demo model speaks Qwen3's shapes: think blocks, Hermes tool calls, its chat template.

Its build is deterministic: the files match the hashes its marker recorded, and two short builds in
two processes with other thread settings give the same bytes. Fast tests check the tokenizer and
the chat template; sampling tests check that the trained
model writes well-formed `<think>` blocks and `<tool_call>` JSON on the fixture prompts (seeded);
the slow tests send the same greedy requests to the real vLLM with the reasoning and tool-call
parsers the chat template calls for, then without parsers, and check what comes back (and what
the kit's client reads from the same answers, plain and streamed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from engines import vllm_engine

from kit.demo import fixture_text as text
from kit.demo.fixtures import is_long, write_fixtures
from kit.demo.model import MARKER, PINNED_KERNELS, read_marker, verify_demo_model
from kit.demo.tokenizer import MARKUP_TOKENS
from kit.prompts.adapters import get_adapter

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


# --- the build: recorded hashes, the same bytes every time ---------------------------------------


def sha256_of(path: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in path.iterdir() if f.name != MARKER}


def test_the_build_records_the_hashes_of_its_files(demo_model, tmp_path) -> None:
    recorded = read_marker(demo_model)["files"]
    assert {"model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"} <= set(recorded)
    assert recorded == sha256_of(demo_model) and verify_demo_model(demo_model) == []
    copy = shutil.copytree(demo_model, tmp_path / "model")
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(weights)
    assert [p.split(":")[0] for p in verify_demo_model(copy)] == ["model.safetensors"]


BUILD = (
    "import sys; from kit.demo.model import ensure_demo_model; "
    "ensure_demo_model(sys.argv[1], train_steps=4, quiet=True)"
)


@pytest.mark.slow
def test_two_builds_in_two_processes_give_the_same_bytes(tmp_path) -> None:
    """Short builds (4 steps: every part of a build, tokenizer, corpus, init and training, in little
    time), side by side: one with torch's default threads, one told to use two, one asking torch and
    MKL for their generic kernels (unpinned, those build other bytes than this CPU's AVX-512 or AVX2
    ones: the build pins its kernels, kit.demo.model.PINNED_KERNELS)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    settings = [
        {},
        {"OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "true"},
        {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    ]
    builds = [
        subprocess.Popen([sys.executable, "-c", BUILD, str(tmp_path / f"m{i}")], env=env | extra)
        for i, extra in enumerate(settings)
    ]
    assert [b.wait(timeout=300) for b in builds] == [0, 0, 0]
    first, *others = (tmp_path / f"m{i}" for i in range(len(settings)))
    for other in others:
        assert read_marker(first)["files"] == read_marker(other)["files"] == sha256_of(first)
        assert sha256_of(other) == sha256_of(first)
    assert read_marker(first)["pinned"] == PINNED_KERNELS


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
    """Seeded sampling at temperature 0.7, in left-padded batches of ten."""
    import torch

    tokenizer.padding_side = "left"
    outs: list[str] = []
    for at in range(0, len(prompts), 10):
        texts = [render(tokenizer, m, tools=t, enable_thinking=thinking) for m, t in prompts[at : at + 10]]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(at)
        out = model.generate(
            **batch, max_new_tokens=max_new_tokens, do_sample=True, temperature=0.7, top_p=0.95
        )
        outs += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return outs


LEARNED = 0.6
"""The share of answers in a learned shape these tests ask of the demo model. They judge whether the
model learned a shape (a model that did not answers 0 of 40 in it), not how well one build learned
it: the bytes of a build differ between CPUs (torch's kernels sum in a different order on AVX-512
than on AVX2), and so does each share. On 40 prompts (20 for each of two sources) a share measured at
0.87-0.92 on one build stays above 0.6 on any build within several standard deviations; on the 10-12
prompts these tests used before, a build that wrote 6 valid tool calls of 10 failed a 7-of-10 bar
that another build had passed (issue 46)."""


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags)


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
    prompts = fixture_prompts(tmp_path, "metamathqa", 20) + fixture_prompts(tmp_path, "infinity_instruct", 20)
    outs = sample(model, tokenizer, prompts, thinking=True)
    blocks = [THINK_BLOCK.fullmatch(o) for o in outs]
    assert share([b is not None and "<think>" not in b.group(2) for b in blocks]) >= LEARNED, outs
    math_reasoning = sorted(len(b.group(1)) for b in blocks[:20] if b)
    assert math_reasoning and math_reasoning[len(math_reasoning) // 2] > 40, outs[:20]


def test_thinking_off_answers_without_think_tags(model, tokenizer, tmp_path) -> None:
    prompts = fixture_prompts(tmp_path, "metamathqa", 20) + fixture_prompts(tmp_path, "codefeedback", 20)
    outs = sample(model, tokenizer, prompts, thinking=False)
    assert share(["think>" not in o and bool(o.strip()) for o in outs]) >= LEARNED, outs


TOOL_CALLS = 0.4
"""The share of valid tool calls asked of the demo model on 40 tool-offering prompts: one build
measured 0.69-0.76 thinking on and 0.76-0.89 off (two seeds, 45 prompts); a model that did not learn
the shape writes none."""


@pytest.mark.parametrize("thinking", [True, False])
def test_hermes_prompts_get_tool_calls_naming_a_listed_tool(model, tokenizer, tmp_path, thinking) -> None:
    prompts = [p for p in fixture_prompts(tmp_path, "hermes_fc", 60) if p[0][-1]["role"] == "user"][:40]
    assert len(prompts) == 40
    outs = sample(model, tokenizer, prompts, thinking=thinking, max_new_tokens=160)
    answers = [THINK_BLOCK.fullmatch(o) for o in outs] if thinking else outs
    answers = [(a.group(2) if a else "") if thinking else a for a in answers]
    valid = [tool_call_is_valid(a, tools) for a, (_, tools) in zip(answers, prompts, strict=True)]
    assert share(valid) >= TOOL_CALLS, outs


def test_the_demo_params_give_the_models_answers_room(model, tokenizer, tmp_path) -> None:
    """The demo's max_tokens against the answers the model writes to the demo's sources, thinking on
    (the demo's default): at least 90% end within the budget (at 64, half were cut and `kit export`
    dropped them), and the budget leaves the prompts the demo plans their room in the context."""
    import torch
    import yaml

    folder = Path(__file__).resolve().parent.parent / "params"
    params = [yaml.safe_load((folder / name).read_text()) for name in ("demo.yaml", "demo-vllm.yaml")]
    budget = min(p["generate"]["sampling"]["max_tokens"] for p in params)
    for p in params:
        room = model.config.max_position_embeddings
        assert p["data"]["max_prompt_tokens"] + p["generate"]["sampling"]["max_tokens"] <= room
    sources = {s["adapter"] for p in params for s in p["data"]["sources"]}
    prompts = [p for source in sorted(sources) for p in fixture_prompts(tmp_path, source, 3)]
    texts = [render(tokenizer, m, tools=t) for m, t in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=budget, do_sample=True, temperature=0.7, top_p=0.95)
    answers = out[:, batch["input_ids"].shape[1] :]
    ended = (answers == tokenizer.eos_token_id).any(dim=1)
    assert ended.float().mean() >= 0.9, tokenizer.batch_decode(answers[~ended])


# --- the real vLLM: the parsers the chat template calls for, then none -----------------------------


def reasoning_of(message: dict) -> str | None:
    """The split-out reasoning: `reasoning` in vLLM 0.32, `reasoning_content` in older versions."""
    return message.get("reasoning") or message.get("reasoning_content")


def chat(server, messages, tools=None, api_key: str | None = None, **fields) -> dict:
    """One greedy chat completion's first choice."""
    body = {"model": str(server.params.model.path), "messages": messages, "max_tokens": 200, "temperature": 0}
    body |= {"tools": tools} if tools else {}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    r = httpx.post(f"{server.base_url}/v1/chat/completions", json=body | fields, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


@pytest.fixture(scope="module")
def vllm_answers(demo_model, tmp_path_factory, vllm_server) -> dict[str, dict]:
    """The same greedy requests to vLLM with its parsers on (`auto`: from the chat template), then off.

    The parsed answers come from the session's shared server (tests/engines.py: the same command
    line, and an API key the requests send). The server without parsers is this fixture's own: no
    other test asks the kit for one outside `kit generate`; it starts beside the shared one.
    Without a tool-call parser vLLM refuses `tools` unless tool_choice is none; the prompt is the same."""
    from kit.engines import start_server
    from kit.params import RunParams

    data = tmp_path_factory.mktemp("vllm-prompts")
    math = [m for m, _ in fixture_prompts(data, "metamathqa", 3)]
    hermes = [p for p in fixture_prompts(data, "hermes_fc", 8) if p[0][-1]["role"] == "user"][:4]
    logs = tmp_path_factory.mktemp("vllm-logs")
    answers: dict[str, dict] = {"hermes_tools": {f"hermes{i}": tools for i, (_, tools) in enumerate(hermes)}}
    engine = vllm_engine(tool_call_parser=None, reasoning_parser=None)
    params = RunParams.model_validate({"run": "t", "model": {"path": str(demo_model)}, "engine": engine})
    plain = start_server(params, logs, name="plain")
    vllm_server.launch()  # both start at once: on two cores that beats one after the other
    plain.start()
    try:
        for mode, key in (("parsed", vllm_server.api_key), ("plain", None)):
            server = vllm_server.ready() if mode == "parsed" else plain.wait_ready()
            tool_choice = {} if mode == "parsed" else {"tool_choice": "none"}
            got = {f"math{i}": chat(server, m, api_key=key) for i, m in enumerate(math)}
            got |= {
                f"off{i}": chat(server, m, api_key=key, chat_template_kwargs={"enable_thinking": False})
                for i, m in enumerate(math)
            }
            got |= {
                f"hermes{i}": chat(server, m, t, api_key=key, **tool_choice)
                for i, (m, t) in enumerate(hermes)
            }
            if mode == "parsed":
                got["kit"] = asyncio.run(
                    kit_client_answers(server, math[:2] + [m for m, _ in hermes], hermes, key)
                )
            got["argv"] = server.log_path.read_text().splitlines()[0]
            answers[mode] = got
    finally:
        plain.stop()
    return answers


async def kit_client_answers(server, messages: list, hermes: list, api_key: str | None) -> list[tuple]:
    """The kit's client on the same greedy requests, plain JSON then streamed: (plain, streamed) pairs."""
    from kit.engines.client import EngineClient

    tools = [None] * (len(messages) - len(hermes)) + [t for _, t in hermes]
    async with EngineClient(server.base_url, "vllm", api_key=api_key) as client:
        return [
            tuple(
                [
                    await client.chat(m, tools=t, max_tokens=200, temperature=0, stream=s)
                    for s in (False, True)
                ]
            )
            for m, t in zip(messages, tools, strict=True)
        ]


@pytest.mark.slow
def test_the_kit_client_reads_the_same_answer_plain_and_streamed(vllm_answers) -> None:
    """Reasoning deltas and tool-call fragments, assembled from vLLM's stream, equal the plain answer."""
    pairs = vllm_answers["parsed"]["kit"]
    assert any(plain.reasoning for plain, _ in pairs) and any(plain.tool_calls for plain, _ in pairs), pairs
    # A call the tiny model wrote as broken JSON is vLLM's to tell apart, not the client's: its hermes
    # parser leaves the call's text in a plain answer's content and withholds it from a stream.
    whole = [(p, s) for p, s in pairs if "<tool_call>" not in (p.text or "")]
    assert len(whole) >= len(pairs) - 1, [p.text for p, _ in pairs]
    for plain, streamed in whole:
        # before a call, vLLM streams the blank between </think> and <tool_call> as content
        assert (streamed.text.strip(), streamed.reasoning) == (plain.text.strip(), plain.reasoning)
        assert streamed.finish_reason == plain.finish_reason
        assert [c["function"] for c in streamed.tool_calls or []] == [
            c["function"] for c in plain.tool_calls or []
        ]


@pytest.mark.slow
def test_vllm_command_has_the_parsers_the_template_calls_for(vllm_answers) -> None:
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in vllm_answers["parsed"]["argv"]
    assert "--reasoning-parser qwen3" in vllm_answers["parsed"]["argv"]
    assert "parser" not in vllm_answers["plain"]["argv"]


@pytest.mark.slow
def test_vllm_reasoning_parser_splits_the_think_block_out(vllm_answers) -> None:
    parsed = vllm_answers["parsed"]
    for key in ("math0", "math1", "math2"):
        message = parsed[key]["message"]
        assert (reasoning_of(message) or "").strip() and (message["content"] or "").strip(), message
        assert "think>" not in message["content"] + reasoning_of(message), message
    for key in ("off0", "off1", "off2"):
        message = parsed[key]["message"]
        # thinking off: the parser leaves the whole answer in the content (a stray "</think>" the tiny
        # model writes of its own there, as it did greedily on one CI machine, is the model's)
        assert not reasoning_of(message) and message["content"].strip(), message


@pytest.mark.slow
def test_vllm_tool_parser_returns_the_hermes_calls(vllm_answers) -> None:
    parsed, offered = vllm_answers["parsed"], vllm_answers["hermes_tools"]
    called = {key: parsed[key]["message"] for key in offered if parsed[key]["message"].get("tool_calls")}
    assert len(called) >= 3, {key: parsed[key]["message"] for key in offered}
    known = {tool["function"]["name"] for _, tool in text.TOOLS}
    picked = []
    for key, message in called.items():
        assert parsed[key]["finish_reason"] == "tool_calls" and len(message["tool_calls"]) == 1, message
        function = message["tool_calls"][0]["function"]
        assert function["name"] in known and isinstance(json.loads(function["arguments"]), dict), message
        assert "tool_call>" not in (message["content"] or ""), message
        picked.append(function["name"] in {t["function"]["name"] for t in offered[key]})
    assert sum(picked) >= len(picked) / 2, called  # the tiny model sometimes calls a tool not offered


@pytest.mark.slow
def test_without_parsers_the_same_text_stays_in_the_content(vllm_answers) -> None:
    parsed, plain = vllm_answers["parsed"], vllm_answers["plain"]
    for key in ("math0", "math1", "math2"):
        split, whole = parsed[key]["message"], plain[key]["message"]
        assert whole.get("reasoning") is None and whole.get("reasoning_content") is None, whole
        assert whole["content"].startswith("<think>\n") and "\n</think>\n\n" in whole["content"], whole
        thought, answer = whole["content"].removeprefix("<think>").split("</think>")
        assert (thought.strip(), answer.strip()) == (reasoning_of(split).strip(), split["content"].strip())
    for key in vllm_answers["hermes_tools"]:
        split, whole = parsed[key]["message"], plain[key]["message"]
        assert not whole.get("tool_calls") and plain[key]["finish_reason"] != "tool_calls", whole
        for call in split.get("tool_calls") or []:
            text_call = json.loads(TOOL_CALL.search(whole["content"]).group(1))
            assert text_call == {
                "name": call["function"]["name"],
                "arguments": json.loads(call["function"]["arguments"]),
            }


@pytest.mark.slow
def test_the_build_is_readable_as_the_users_files_are(tmp_path) -> None:
    """Every file of the model (the weights too: safetensors wrote them 0600) gets 0666 less the
    umask, the folder 0777 less it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    build = subprocess.run(
        [sys.executable, "-c", BUILD, str(tmp_path / "m")], env=env, preexec_fn=lambda: os.umask(0o027)
    )
    assert build.returncode == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "m").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o640}, modes
    assert (tmp_path / "m").stat().st_mode & 0o777 == 0o750
