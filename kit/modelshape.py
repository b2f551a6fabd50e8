"""Shape-only model folders: a real architecture's `config.json` and a tokenizer, no weights.

An engine that loads random weights for a config (SGLang and vLLM: `--load-format dummy`) runs such
a folder at the real model's speed and memory: step times, KV-cache capacity and the speculative
arms' costs are the real model's, the text is noise. A user can so measure stage 2's decision on
their own GPU before downloading 54 GB of weights:

    kit model-shape qwen3-8b /models/qwen3-8b-shape      # then model.path: /models/qwen3-8b-shape
    kit model-shape qwen3-8b-eagle3 /models/eagle3-shape  # engine.speculative.draft_model_path

A draft head's shape (EAGLE-3) measures the pure cost of speculating: random draft weights are
almost never accepted (accept length ~1), so the arm pays k draft passes and a wider verify step for
nothing, which is the cost the cost model prices.

This module holds the shapes and reads the marker (the probe and the flavors ask it); the folder is
written by kit.demo.shape_model, beside the demo model's builder, whose tokenizer it reuses.

The folder is marked (`kit_shape.json`): the probe says "shape only: timings real, text meaningless",
and the flavors that can load dummy weights add their flag (`Flavor.shape_only_args`). Configs are the
published ones (the `source` of each shape names its Hugging Face repository). The tokenizer is a small
byte-level BPE with a plain ChatML template, padded to the config's vocabulary so that every token id a
random model emits decodes to some text (an id outside the tokenizer would decode to nothing, and an
empty answer is no completion); the template has no thinking and no tools, so no parser is started
for answers that cannot hold them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.arch import arch_from_config
from kit.artifacts.probe_sections import ShapeMarker

MARKER = "kit_shape.json"
"""The file that marks a folder as shape only (its content says which shape, and why no weights)."""
MEANING = "shape only: timings real, text meaningless"
DEMO_MARKER = ".kit-demo-model.json"
"""The file kit.demo.model writes last in the demo model's folder (its version, seed, loss): named
here, beside the shape marker, so that runtime code (the dataset card) knows a kit-made model
without importing kit.demo."""

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content if message.content is string else '')"
    " + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_QWEN3 = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


_QWEN36_TAGS = {
    "<|vision_start|>": 248053,
    "<|vision_end|>": 248054,
    "<|image_pad|>": 248056,
    "<|video_pad|>": 248057,
}
"""The vision tags of Qwen3.5 / 3.6's tokenizer and their ids (the processor and the config name them)."""
_QWEN_VL_PROCESSOR = {
    "processor_class": "Qwen3VLProcessor",
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
}


@dataclass(frozen=True)
class Shape:
    """One architecture the kit can write: its published config and where it was published."""

    name: str
    source: str
    config: dict[str, Any] = field(repr=False)
    draft_of: str | None = None
    """For a draft head (EAGLE-3): the shape it drafts for (`engine.speculative.draft_model_path`)."""
    extra_files: dict[str, dict] = field(default_factory=dict, repr=False)
    """More JSON files of the folder (a multimodal model's image and video processor configs: SGLang
    loads the processor of such an architecture at start, whether or not a request holds an image)."""
    tags: dict[str, int] = field(default_factory=dict, repr=False)
    """Tokens the tokenizer must hold beyond the chat ones, at the ids the config gives them (a
    processor looks its tags up by name)."""

    @property
    def text(self) -> dict[str, Any]:
        """The language model's settings: `text_config` of a multimodal config, else the config."""
        return self.config.get("text_config", self.config)

    @property
    def params_b(self) -> float:
        if self.draft_of:  # one decoder layer, its fc over three target layers and a draft vocabulary
            c = self.config
            h, i, v = c["hidden_size"], c["intermediate_size"], c.get("draft_vocab_size", c["vocab_size"])
            kv = c["num_key_value_heads"] * c["head_dim"]
            return (3 * h * h + 2 * h * (h + 2 * kv) + h * h + 3 * h * i + h * v) / 1e9
        return arch_from_config(self.config).param_counts()[0] / 1e9


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape(
            "qwen3-8b",
            "Qwen/Qwen3-8B",
            _QWEN3
            | {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "max_window_layers": 36,
                "num_attention_heads": 32,
                "num_hidden_layers": 36,
                "num_key_value_heads": 8,
            },
        ),
        Shape(
            "qwen3-32b",
            "Qwen/Qwen3-32B",
            _QWEN3
            | {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "hidden_size": 5120,
                "intermediate_size": 25600,
                "max_window_layers": 64,
                "num_attention_heads": 64,
                "num_hidden_layers": 64,
                "num_key_value_heads": 8,
            },
        ),
        Shape(
            "qwen3-30b-a3b",
            "Qwen/Qwen3-30B-A3B",
            _QWEN3
            | {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "decoder_sparse_step": 1,
                "hidden_size": 2048,
                "intermediate_size": 6144,
                "max_window_layers": 48,
                "mlp_only_layers": [],
                "moe_intermediate_size": 768,
                "norm_topk_prob": True,
                "num_attention_heads": 32,
                "num_experts": 128,
                "num_experts_per_tok": 8,
                "num_hidden_layers": 48,
                "num_key_value_heads": 4,
                "output_router_logits": False,
                "router_aux_loss_coef": 0.001,
            },
        ),
        Shape(
            "qwen3.6-27b",
            "Qwen/Qwen3.6-27B (the text model as published; the vision tower, which a text-only job never"
            " runs, at transformers' Qwen3.5 defaults)",
            {
                "architectures": ["Qwen3_5ForConditionalGeneration"],
                "model_type": "qwen3_5",
                "image_token_id": _QWEN36_TAGS["<|image_pad|>"],
                "video_token_id": _QWEN36_TAGS["<|video_pad|>"],
                "vision_start_token_id": _QWEN36_TAGS["<|vision_start|>"],
                "vision_end_token_id": _QWEN36_TAGS["<|vision_end|>"],
                "tie_word_embeddings": False,
                "text_config": {
                    "model_type": "qwen3_5_text",
                    "attention_bias": False,
                    "attention_dropout": 0.0,
                    "attn_output_gate": True,
                    "bos_token_id": None,
                    "dtype": "bfloat16",
                    "eos_token_id": 248046,
                    "full_attention_interval": 4,
                    "head_dim": 256,
                    "hidden_act": "silu",
                    "hidden_size": 5120,
                    "initializer_range": 0.02,
                    "intermediate_size": 17408,
                    "layer_types": [
                        "linear_attention",
                        "linear_attention",
                        "linear_attention",
                        "full_attention",
                    ]
                    * 16,
                    "linear_conv_kernel_dim": 4,
                    "linear_key_head_dim": 128,
                    "linear_num_key_heads": 16,
                    "linear_num_value_heads": 48,
                    "linear_value_head_dim": 128,
                    "max_position_embeddings": 262144,
                    "mtp_num_hidden_layers": 1,
                    "mtp_use_dedicated_embeddings": False,
                    "num_attention_heads": 24,
                    "num_hidden_layers": 64,
                    "num_key_value_heads": 4,
                    "rms_norm_eps": 1e-06,
                    "rope_parameters": {
                        "mrope_interleaved": True,
                        "mrope_section": [11, 11, 10],
                        "partial_rotary_factor": 0.25,
                        "rope_theta": 10000000,
                        "rope_type": "default",
                    },
                    "tie_word_embeddings": False,
                    "use_cache": True,
                    "vocab_size": 248320,
                },
                "vision_config": {
                    "model_type": "qwen3_5",
                    "deepstack_visual_indexes": [],
                    "depth": 27,
                    "hidden_act": "gelu_pytorch_tanh",
                    "hidden_size": 1152,
                    "in_channels": 3,
                    "initializer_range": 0.02,
                    "intermediate_size": 4304,
                    "num_heads": 16,
                    "num_position_embeddings": 2304,
                    "out_hidden_size": 5120,
                    "patch_size": 16,
                    "spatial_merge_size": 2,
                    "temporal_patch_size": 2,
                },
            },
            extra_files={
                "preprocessor_config.json": _QWEN_VL_PROCESSOR
                | {"image_processor_type": "Qwen2VLImageProcessorFast"},
                "video_preprocessor_config.json": _QWEN_VL_PROCESSOR
                | {"video_processor_type": "Qwen3VLVideoProcessor"},
            },
            tags=_QWEN36_TAGS,
        ),
        Shape(
            "qwen3-8b-eagle3",
            "SpecForge's qwen3-8B-eagle3 draft config (the shape of Tengyunw/qwen3_8b_eagle3)",
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "bos_token_id": 151643,
                "eos_token_id": 151645,
                "head_dim": 128,
                "hidden_act": "silu",
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "max_position_embeddings": 40960,
                "num_attention_heads": 32,
                "num_hidden_layers": 1,
                "num_key_value_heads": 8,
                "rms_norm_eps": 1e-06,
                "rope_theta": 1000000,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
                "use_cache": True,
                "vocab_size": 151936,
                "draft_vocab_size": 32000,
            },
            draft_of="qwen3-8b",
        ),
        Shape(
            "llama-3.1-8b",
            "meta-llama/Llama-3.1-8B-Instruct",
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "attention_bias": False,
                "attention_dropout": 0.0,
                "bos_token_id": 128000,
                "eos_token_id": [128001, 128008, 128009],
                "head_dim": 128,
                "hidden_act": "silu",
                "hidden_size": 4096,
                "initializer_range": 0.02,
                "intermediate_size": 14336,
                "max_position_embeddings": 131072,
                "mlp_bias": False,
                "num_attention_heads": 32,
                "num_hidden_layers": 32,
                "num_key_value_heads": 8,
                "pretraining_tp": 1,
                "rms_norm_eps": 1e-05,
                "rope_scaling": {
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                    "rope_type": "llama3",
                },
                "rope_theta": 500000.0,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
                "use_cache": True,
                "vocab_size": 128256,
            },
        ),
    )
}


def shape_of(model_dir: str | Path) -> ShapeMarker | None:
    """The marker of a shape-only folder (`{"shape": ..., "source": ...}`), or None for a real one."""
    path = Path(model_dir).expanduser() / MARKER
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return ShapeMarker(shape="unknown", source=None, error=f"{path} is not valid JSON")
    return marker if isinstance(marker, dict) else ShapeMarker(shape="unknown", source=None)
