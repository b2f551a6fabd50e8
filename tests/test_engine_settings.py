"""Engine settings: arms, k -> each flavor's spelling, decision -> stage 3, parsers, launcher,
request fields, counters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.artifacts import EngineSettings
from kit.engines import parsers
from kit.engines.arms import Arm
from kit.engines.flavors import flavor
from kit.engines.flavors.base import SpeculativeJson
from kit.engines.flavors.sglang import speculative_flags as sglang_spec_flags
from kit.engines.flavors.vllm import speculative_config as vllm_spec_config
from kit.engines.launcher import parse_help
from kit.engines.metrics import parse_samples
from kit.engines.settings import (
    SETTING_FIELDS,
    SPELT,
    AppliedSettings,
    apply_settings,
    arm_engine,
    decided_settings,
    engine_unavailable_reason,
    speculative_params,
    sweep_arms,
)
from kit.engines.spec_metrics import SpecCounters
from kit.params import RunParams, SpeculativeParams


def params(**engine: object) -> RunParams:
    return RunParams.model_validate(
        {"run": "t", "model": {"path": "/m"}, "engine": engine, "decide": {"concurrencies": [1, 64]}}
    )


def test_the_k_rule_is_the_same_for_every_consumer() -> None:
    """An arm stays `Arm(k, algorithm)` until its flavor spells it: vLLM's k is its
    `num_speculative_tokens`, SGLang's a chain of k steps, top-k 1, k + 1 draft tokens."""
    p = params(flavor="vllm", speculative={"algorithm": "MTP"})
    arms = sweep_arms(p)
    assert [a.name for a in arms] == ["plain", "spec_k1", "spec_k2", "spec_k3"]
    eng = arm_engine(p, arms[3], hybrid=True)
    assert eng.speculative.num_steps == 3 and eng.speculative.num_draft_tokens is None
    assert eng.max_running_requests == 64 and eng.mamba_strategy == "extra_buffer"
    assert vllm_spec_config(eng.speculative) == {"method": "mtp", "num_speculative_tokens": 3}
    sg = arm_engine(params(flavor="sglang", speculative={"algorithm": "MTP"}), arms[3], hybrid=False)
    assert (sg.speculative.num_steps, sg.speculative.eagle_topk, sg.speculative.num_draft_tokens) == (3, 1, 4)
    assert sglang_spec_flags(sg.speculative) == [
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    settings = decided_settings(
        arms[3], flavor="vllm", memory_running=300, mem_fraction=0.8, dp_size=1, tp_size=1,
        attention_backend=None, hybrid=False,
    )  # fmt: skip
    applied, taken = apply_settings(p, arms[3], settings)
    assert applied.engine.speculative == eng.speculative, "the decision names what the sweep measured"
    assert "max_running_requests" not in taken, "vLLM keeps its own capacity under speculation"
    assert applied.engine.max_running_requests is None


def test_the_decision_never_lowers_the_batch_below_the_engines_capacity() -> None:
    """Plain decoding keeps the engine's own capacity; SGLang under speculation gets what memory
    holds (unset, it would drop to 48); only a measured fall in throughput caps the batch."""
    common = {"mem_fraction": 0.8, "dp_size": 2, "tp_size": 1, "attention_backend": None, "hybrid": False}
    for name in ("sglang", "vllm"):
        plain = decided_settings(Arm(0), flavor=name, memory_running=900, **common)
        assert plain.max_running_requests is None and "own capacity" in plain.max_running_requests_source
    spec = decided_settings(Arm(3, "MTP"), flavor="sglang", memory_running=900, **common)
    assert spec.max_running_requests == 900 and "48" in spec.max_running_requests_source
    capped = decided_settings(Arm(0), flavor="vllm", memory_running=900, cap_running=24, **common)
    assert capped.max_running_requests == 24 and "fall" in capped.max_running_requests_source
    applied, taken = apply_settings(params(flavor="vllm"), Arm(0), capped)
    assert applied.engine.max_running_requests == 24 == taken["max_running_requests"]


def test_an_older_decision_that_capped_plain_decoding_at_the_sweep_level_no_longer_does() -> None:
    old = {"speculative": False, "spec_k": 0, "max_running_requests": 16, "cuda_graph_max_bs": 16,
           "client_concurrency": 16, "dp_size": 1}  # fmt: skip
    settings = EngineSettings.from_json(old)
    assert settings.earlier_arm() == Arm(0) and settings.older_plain_cap
    applied, taken = apply_settings(params(flavor="vllm"), Arm(0), settings)
    assert applied.engine.max_running_requests is None and applied.engine.cuda_graph_max_bs is None
    assert "max_running_requests" not in taken


def test_a_plain_decision_turns_speculation_off_and_user_settings_win() -> None:
    p = params(flavor="sglang", speculative={"algorithm": "NGRAM", "num_steps": 2}, max_running_requests=7)
    plain = decided_settings(
        Arm(0), flavor="sglang", memory_running=32, cap_running=32, mem_fraction=0.8, dp_size=2,
        tp_size=1, attention_backend="fa3", hybrid=False,
    )  # fmt: skip
    applied, taken = apply_settings(p, Arm(0), plain)
    assert applied.engine.speculative.algorithm is None and taken["speculative"] is None
    assert applied.engine.max_running_requests == 7, "a value the user wrote wins"
    assert applied.engine.dp_size == 2 and applied.engine.attention_backend == "fa3"


def test_speculative_params_keep_the_draft_model() -> None:
    spec = speculative_params(
        Arm(2, "STANDALONE"),
        flavor("vllm"),
        params(speculative={"draft_model_path": "/d"}).engine.speculative,
    )
    assert spec.algorithm == "STANDALONE" and str(spec.draft_model_path) == "/d" and spec.num_steps == 2


@pytest.mark.parametrize(
    ("engine", "mtp", "why"),
    [
        ({"flavor": "transformers"}, "present", "no speculative decoding"),
        ({"flavor": "vllm", "speculative": {"algorithm": "MTP"}}, "declared_missing", "lacks their weights"),
        ({"flavor": "vllm"}, "absent_from_architecture", "try algorithm NGRAM"),
        ({"flavor": "sglang", "speculative": {"algorithm": "EAGLE3"}}, "present", "draft_model_path"),
        ({"flavor": "vllm", "speculative": {"algorithm": "NGRAM"}}, "absent_from_architecture", None),
        ({"flavor": "sglang"}, "present", None),
    ],
)
def test_why_speculation_cannot_run(engine: dict, mtp: str, why: str | None) -> None:
    reason = engine_unavailable_reason(params(**engine).engine, mtp)
    assert (reason is None) if why is None else (why in reason)


QWEN3_JSON = (
    "{% if tools %}<tool_call>{json}</tool_call>{% endif %}{% if enable_thinking %}<think>{% endif %}"
)
QWEN36_XML = "<tool_call>\n<function=f>\n<parameter=a>1</parameter></function></tool_call> <think>"
DEEPSEEK_V31 = "<｜tool▁calls▁begin｜> {% if thinking %}<think>{% endif %}"


@pytest.mark.parametrize(
    ("template", "vllm", "sglang"),
    [
        (QWEN3_JSON, ("hermes", "qwen3"), ("qwen", "qwen3")),
        (QWEN36_XML, ("qwen3_coder", "qwen3"), ("qwen3_coder", "qwen3")),
        (DEEPSEEK_V31, ("deepseek_v31", "deepseek_v3"), ("deepseekv31", "deepseek-v3")),
        ("{% if tools %}<tool_call>{% endif %}", ("hermes", None), ("qwen", None)),
        ("{{ messages }}", (None, None), (None, None)),
    ],
)
def test_parsers_follow_the_chat_template(tmp_path: Path, template: str, vllm: tuple, sglang: tuple) -> None:
    (tmp_path / "chat_template.jinja").write_text(template)
    for name, expected in (("vllm", vllm), ("sglang", sglang)):
        got = parsers.recommended(flavor(name), tmp_path)
        assert (got.tool_call, got.reasoning) == expected
    assert parsers.recommended(flavor("transformers"), tmp_path).tool_call is None


def test_parser_params_auto_off_and_named(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text(QWEN3_JSON)
    vllm = flavor("vllm")
    auto = parsers.resolve(vllm, params(flavor="vllm").engine, tmp_path)
    assert (auto.tool_call, auto.reasoning) == ("hermes", "qwen3")
    off = parsers.resolve(
        vllm, params(flavor="vllm", tool_call_parser=None, reasoning_parser=None).engine, tmp_path
    )
    assert (off.tool_call, off.reasoning) == (None, None)
    named = parsers.resolve(vllm, params(flavor="vllm", tool_call_parser="qwen3_xml").engine, tmp_path)
    assert named.tool_call == "qwen3_xml" and named.reasoning == "qwen3"


def test_launcher_help_flags_and_choices() -> None:
    text = """usage: sglang serve [-h] --model-path MODEL_PATH [--cuda-graph-max-bs-decode N]
                    [--tool-call-parser {auto,qwen,qwen25,qwen3_coder,hermes}]
  --speculative-draft-
                        model-path the wrapped remainder of a long flag name"""
    launcher = parse_help(text, "0.5.23")
    assert {"--model-path", "--cuda-graph-max-bs-decode", "--tool-call-parser"} <= launcher.flags
    assert "--speculative-draft-" not in launcher.flags, "a flag cut by line wrapping is not a flag"
    assert launcher.choices["--tool-call-parser"] == ("auto", "qwen", "qwen25", "qwen3_coder", "hermes")
    assert launcher.check_choice("--tool-call-parser", "qwen") is None
    assert "version 0.5.23" in launcher.check_choice("--tool-call-parser", "hermes2")


def test_vllm_counters_give_accept_length_per_position() -> None:
    scrape = lambda d, a, p: parse_samples(  # noqa: E731
        f'vllm:spec_decode_num_drafts_total{{engine="0"}} {d}\n'
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {3 * d}\n'
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {a}\n'
        + "".join(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {v}\n'
            for i, v in enumerate(p)
        )
    )
    before = SpecCounters.from_samples(scrape(100, 150, [80, 50, 20]))
    after = SpecCounters.from_samples(scrape(1219, 2940, [1177, 1019, 744]))
    delta = after.since(before)
    assert delta.accept_length == pytest.approx(1 + 2790 / 1119)
    assert delta.position_acceptance == pytest.approx([1097 / 1119, 969 / 1119, 724 / 1119])
    assert SpecCounters.from_samples(parse_samples("vllm:num_requests_running 3\n")) is None
    assert SpecCounters(0, 0, 0).accept_length is None


def test_request_fields_per_flavor() -> None:
    from kit.engines.request_fields import request_fields
    from kit.params import SamplingParams

    s = SamplingParams(
        temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, presence_penalty=1.5, thinking=False,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    vllm = request_fields(flavor("vllm"), s)
    assert vllm == {
        "temperature": 0.6, "top_p": 0.95, "presence_penalty": 1.5, "top_k": 20, "min_p": 0.0,
        "chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True,
    }  # fmt: skip
    assert request_fields(flavor("sglang"), s, thinking_kwarg="thinking")["chat_template_kwargs"] == {
        "thinking": False
    }
    tf = request_fields(flavor("transformers"), s, model_generation_config={"eos_token_id": 2, "top_k": 50})
    assert "top_k" not in tf and "presence_penalty" not in tf
    assert json.loads(tf["generation_config"]) == {"eos_token_id": 2, "top_k": 20, "min_p": 0.0}
    (problem,) = flavor("transformers").sampling_problems(s)
    assert problem.startswith("generate.sampling.presence_penalty: transformers serve ignores it")
    (problem,) = flavor("transformers").sampling_problems(SamplingParams(frequency_penalty=0.5))
    assert "repetition_penalty" in problem
    assert flavor("vllm").sampling_problems(s) == []
    assert request_fields(flavor("vllm"), SamplingParams()) == {"temperature": 0.7, "top_p": 1.0}


QWEN3_SWITCH = (
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)
DEEPSEEK_V31_SWITCH = "{% if thinking %}{{'<think>'}}{% else %}{{'</think>'}}{% endif %}"


def test_the_thinking_switch_is_read_from_the_chat_template() -> None:
    from kit.engines.parsers import thinking_switch
    from kit.engines.request_fields import thinking_problem
    from kit.params import SamplingParams

    assert thinking_switch(QWEN3_SWITCH) == "enable_thinking"
    assert thinking_switch(DEEPSEEK_V31_SWITCH) == "thinking"
    assert thinking_switch("{{ messages[0].content }} thinking about it") is None, "text, not a variable"
    assert thinking_switch(None) is None
    on = SamplingParams(thinking=True)
    assert thinking_problem(on, QWEN3_SWITCH) is None
    assert thinking_problem(SamplingParams(), "{{ x }}") is None, "unset: nothing to check"
    assert thinking_problem(on, "{{ x }}").startswith("generate.sampling.thinking: ")
    assert thinking_problem(on, None) is None, "no template to read: left to the engine"


@pytest.mark.parametrize(("template", "switch"), [(QWEN3_JSON, "enable_thinking"), ("{{ messages }}", None)])
def test_the_probe_says_whether_thinking_can_be_switched(tmp_path: Path, template: str, switch: str) -> None:
    from types import SimpleNamespace

    from kit.probe.recommend import _parsers

    (tmp_path / "chat_template.jinja").write_text(template)
    found = _parsers(SimpleNamespace(flavor="vllm", model_path=str(tmp_path)))
    assert found["thinking_switch"] == switch
    assert ("set generate.sampling.thinking" in found["thinking_note"]) is bool(switch)


def test_vllm_without_a_tool_parser_gets_tool_choice_none(tmp_path: Path) -> None:
    """vLLM answers 400 to tools without a parser; `none` keeps the tools in the prompt."""
    from kit.engines.request_fields import tool_request_fields

    (tmp_path / "chat_template.jinja").write_text(QWEN3_JSON)

    def fields(**engine: object) -> dict:
        p = params(**engine)
        return tool_request_fields(
            p.model_copy(update={"model": p.model.model_copy(update={"path": tmp_path})})
        )

    assert fields(flavor="vllm") == {}, "auto: the template's parser (hermes) is on"
    assert fields(flavor="vllm", tool_call_parser=None) == {"tool_choice": "none"}
    assert fields(flavor="sglang", tool_call_parser=None) == {}
    assert fields(flavor="transformers") == {}, "transformers serve rejects tool_choice"


def test_min_p_under_vllm_speculation_is_refused() -> None:
    from kit.params import SamplingParams

    s = SamplingParams(min_p=0.05)
    vllm, sglang = flavor("vllm"), flavor("sglang")
    (problem,) = vllm.sampling_problems(s, speculative=True)
    assert problem.startswith("generate.sampling.min_p: vLLM rejects min_p under speculative decoding")
    assert vllm.sampling_problems(s) == [] and sglang.sampling_problems(s, speculative=True) == []


def test_capacity_from_server_info_as_sglang_0_5_16_answers_it() -> None:
    """/server_info as the real SGLang 0.5.16 answered on the H200 (docs/lab/h200/sglang): the argument
    when the launch set it; null when not, the scheduler's own choice then in internal_states."""
    from kit.engines.capacity import server_info_capacity

    launched = {
        "max_running_requests": 256,
        "dp_size": 1,
        "internal_states": [{"effective_max_running_requests_per_dp": 256}],
    }
    unset = {
        "max_running_requests": None,
        "dp_size": 1,
        "internal_states": [{"effective_max_running_requests_per_dp": 4096}],
    }
    dp2 = {
        "max_running_requests": None,
        "dp_size": 2,
        "internal_states": [{"effective_max_running_requests_per_dp": 100}] * 2,
    }
    assert server_info_capacity([launched]).total == 256
    chosen = server_info_capacity([unset, dp2])
    assert chosen.total == 4096 + 200 and "effective_max_running_requests_per_dp" in chosen.source
    assert server_info_capacity([{"max_running_requests": None, "internal_states": [{}]}]) is None
    assert server_info_capacity([launched, None]) is None


DECISIONS = Path(__file__).parent / "decisions"
"""decision.json as earlier kits wrote it: the previous release (the arm once, as `arm`) and the kit
before it (the arm spelt among `engine_settings`, a cap on plain decoding, `client_concurrency`)."""
USER = {"max_running_requests": 7, "attention_backend": "flashinfer", "speculative": {"algorithm": "NGRAM"}}
"""What a user wrote in the params: it wins over the decision, but for the arm."""
APPLIED = {
    ("previous_release_mtp", False): {
        "max_running_requests": 96, "mem_fraction_static": 0.85, "dp_size": 2, "tp_size": 1,
        "attention_backend": "fa3", "mamba_strategy": "extra_buffer",
        "speculative": {"algorithm": "MTP", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        "chosen_arm": "spec_k3",
    },
    ("previous_release_mtp", True): {
        "mem_fraction_static": 0.85, "dp_size": 2, "tp_size": 1, "mamba_strategy": "extra_buffer",
        "speculative": {"algorithm": "NGRAM", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        "chosen_arm": "spec_k3",
    },
    ("earlier_kit_mtp", False): {
        "max_running_requests": 48, "cuda_graph_max_bs": 48, "mem_fraction_static": 0.8, "dp_size": 1,
        "tp_size": 1, "attention_backend": "triton",
        "speculative": {"algorithm": "MTP", "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
        "chosen_arm": "spec_k2",
    },
    ("earlier_kit_mtp", True): {
        "cuda_graph_max_bs": 48, "mem_fraction_static": 0.8, "dp_size": 1, "tp_size": 1,
        "speculative": {"algorithm": "NGRAM", "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
        "chosen_arm": "spec_k2",
    },
    ("earlier_kit_plain", False): {
        "mem_fraction_static": 0.8, "dp_size": 1, "tp_size": 1, "speculative": None, "chosen_arm": "plain",
    },
    ("earlier_kit_plain", True): {
        "mem_fraction_static": 0.8, "dp_size": 1, "tp_size": 1, "speculative": None, "chosen_arm": "plain",
    },
}  # fmt: skip
"""What stage 3 took from each before the engine settings were a record (the previous release's code)."""
MEASURED_AT = {"previous_release_mtp": 64, "earlier_kit_mtp": 32, "earlier_kit_plain": 16}


@pytest.mark.parametrize(("name", "user"), sorted(APPLIED))
def test_an_earlier_kits_decision_opens_and_applies_the_same_settings(
    tmp_path: Path, name: str, user: bool
) -> None:
    from kit.decide.choose.apply import apply_decision
    from kit.runfolder import RunFolder

    text = (DECISIONS / f"{name}.json").read_text()
    folder = RunFolder(tmp_path)
    folder.decision.write_text(text)
    decision = folder.read_decision()
    assert decision is not None and isinstance(decision.engine_settings, EngineSettings)
    assert decision.to_json() == json.loads(text), "read and written back, the file is unchanged"
    run = params(flavor=decision.engine_flavor, **(USER if user else {}))
    applied, taken = apply_decision(run, decision)
    assert taken == APPLIED[name, user]
    assert list(taken) == list(APPLIED[name, user]), "in the same order (kit generate says them in it)"
    assert applied.engine.speculative.num_steps == (decision.arm.k or None)
    assert decision.measured_at_concurrency == MEASURED_AT[name], "under either kit's name"


def test_the_speculative_sections_json_and_the_applied_settings_name_the_params_fields() -> None:
    """One spelling: an arm's k is written in ArmSpelling's keys, which with the algorithm and the draft
    model are the params' speculative section; what stage 3 takes from a decision is named in
    SETTING_FIELDS' order."""
    assert set(SpeculativeJson.__annotations__) == set(SpeculativeParams.model_fields)
    assert set(SPELT) < set(SpeculativeParams.model_fields)
    assert list(AppliedSettings.__annotations__)[: len(SETTING_FIELDS)] == list(SETTING_FIELDS)
