"""Model architecture facts read from a Hugging Face `config.json`.

One frozen `ModelArch` describes what the memory plan and the cost model need: layer layout
(full attention vs linear attention for hybrid models such as Qwen3.5/3.6 and Qwen3-Next),
attention shape (GQA or MLA), MLP or MoE sizes, vocabulary, and multi-token-prediction layers.
Byte counts are derived properties, never stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from kit.errors import ModelDirError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet / Mamba-style recurrent layer shape (per layer)."""

    num_v_heads: int
    num_k_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    @property
    def ssm_elements(self) -> int:
        """Elements of the recurrent state of one sequence: heads_v x d_k x d_v."""
        return self.num_v_heads * self.k_head_dim * self.v_head_dim

    @property
    def conv_elements(self) -> int:
        """Elements of the short-convolution state of one sequence: conv_dim x (kernel - 1)."""
        conv_dim = 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
        return conv_dim * (self.conv_kernel - 1)


class MlaProjections(TypedDict, total=False):
    """MLA's projection sizes beyond the KV latent, as config.json gives them (a key it lacks is
    absent; the parameter count then takes DeepSeek-V3's)."""

    q_lora_rank: int | None
    """The query's low-rank projection (None or 0: queries projected in full)."""
    qk_nope_head_dim: int
    v_head_dim: int


MLA_PROJECTIONS = tuple(MlaProjections.__annotations__)


@dataclass(frozen=True)
class ModelArch:
    """What the kit needs to know of a decoder-only LM's shape."""

    model_type: str
    architectures: tuple[str, ...]
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_embeddings: bool
    max_positions: int | None
    dtype: str
    layer_types: tuple[str, ...]
    """Per layer: 'full_attention' or 'linear_attention'."""
    linear: LinearAttention | None = None
    kv_lora_rank: int | None = None
    """MLA (DeepSeek-V2/V3): the compressed KV latent replaces per-head K and V."""
    qk_rope_head_dim: int | None = None
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    """Leading layers with a dense MLP in MoE models (`first_k_dense_replace`)."""
    mtp_layers: int = 0
    attn_output_gate: bool = False
    vision_params: int = 0
    """A multimodal wrapper's vision tower (`vision_config`), which an engine loads beside the LM."""
    extra: MlaProjections = field(default_factory=MlaProjections, compare=False)
    """MLA's other projections (empty for other attention; not part of the shape's hash,
    kit.decide.profile.steptimer.config_hash)."""

    # ---- derived layout -------------------------------------------------
    @property
    def full_attention_layers(self) -> int:
        return sum(t == "full_attention" for t in self.layer_types)

    @property
    def linear_attention_layers(self) -> int:
        return sum(t == "linear_attention" for t in self.layer_types)

    @property
    def is_hybrid(self) -> bool:
        return self.linear_attention_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    # ---- memory ---------------------------------------------------------
    def kv_bytes_per_token(self, kv_dtype_bytes: int | None = None) -> int:
        """KV-cache bytes one token occupies over all full-attention layers."""
        b = kv_dtype_bytes or self.dtype_bytes
        if self.is_mla:
            per_layer = (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        else:
            per_layer = 2 * self.num_kv_heads * self.head_dim
        return self.full_attention_layers * per_layer * b

    def state_bytes_per_seq(self, ssm_dtype_bytes: int = 4, conv_dtype_bytes: int = 2) -> int:
        """Recurrent-state bytes one sequence holds over all linear-attention layers.

        SGLang keeps the SSM state in fp32 by default (`--mamba-ssm-dtype`) and the conv state in
        the model dtype: for Qwen3.6-27B that is about 147 MiB per sequence.
        """
        if not self.linear:
            return 0
        per_layer = self.linear.ssm_elements * ssm_dtype_bytes + self.linear.conv_elements * conv_dtype_bytes
        return self.linear_attention_layers * per_layer

    # ---- parameters and FLOPs ---------------------------------------------
    def _attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            e = self.extra
            q_lora = e.get("q_lora_rank") or 0
            nope, rope, v = (
                e.get("qk_nope_head_dim", 128),
                self.qk_rope_head_dim or 64,
                e.get("v_head_dim", 128),
            )
            q = (
                (h * q_lora + q_lora * self.num_heads * (nope + rope))
                if q_lora
                else h * self.num_heads * (nope + rope)
            )
            kv = h * ((self.kv_lora_rank or 0) + rope) + (self.kv_lora_rank or 0) * self.num_heads * (
                nope + v
            )
            return q + kv + self.num_heads * v * h
        q_out = self.num_heads * self.head_dim * (2 if self.attn_output_gate else 1)
        kv = 2 * self.num_kv_heads * self.head_dim
        return h * (q_out + kv) + self.num_heads * self.head_dim * h

    def _linear_params(self) -> int:
        la = self.linear
        assert la is not None
        h = self.hidden_size
        key_dim, value_dim = la.num_k_heads * la.k_head_dim, la.num_v_heads * la.v_head_dim
        in_proj = h * (2 * key_dim + 2 * value_dim + 2 * la.num_v_heads)
        conv = (2 * key_dim + value_dim) * la.conv_kernel
        return in_proj + conv + value_dim * h

    def _mlp_params(self, layer: int) -> tuple[int, int]:
        """(total, active per token) MLP parameters of one layer."""
        h = self.hidden_size
        if self.is_moe and layer >= self.dense_layers:
            expert = 3 * h * self.moe_intermediate_size
            router = h * self.num_experts
            total = expert * (self.num_experts + self.shared_experts) + router
            active = expert * (self.experts_per_token + self.shared_experts) + router
            return total, active
        dense = 3 * h * self.intermediate_size
        return dense, dense

    def param_counts(self) -> tuple[int, int]:
        """(total, active per token) parameters estimated from the shapes, MTP layers excluded."""
        total = active = 0
        for i, kind in enumerate(self.layer_types):
            mixer = self._linear_params() if kind == "linear_attention" else self._attention_params()
            mt, ma = self._mlp_params(i)
            total += mixer + mt
            active += mixer + ma
        emb = self.vocab_size * self.hidden_size
        heads = emb if self.tie_embeddings else 2 * emb
        return total + heads, active + heads

    def resident_weight_bytes(self) -> int:
        """Bytes of weights an engine holds on the GPU when it loads the checkpoint: every layer, the
        embedding and LM head, a vision tower (MTP layers excluded). The Qwen3.6-27B shape: 51.0 GiB
        here, 51.05 as SGLang 0.5.16 loaded it; the cost model's `weight_bytes` (what a step reads,
        no input embedding) says 47.7."""
        return (self.param_counts()[0] + self.vision_params) * self.dtype_bytes

    @property
    def layer_params(self) -> int:
        """Parameters of one average decoder layer (used as the cost of one MTP draft layer)."""
        total, _ = self.param_counts()
        emb = self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)
        return (total - emb) // max(self.num_layers, 1)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal wrappers (Qwen3.5/3.6, Llava...) keep the LM under `text_config`."""
    text = cfg.get("text_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(text)
        merged.setdefault("architectures", cfg.get("architectures"))
        return merged
    return cfg


def _layer_types(c: dict[str, Any], n: int) -> tuple[str, ...]:
    types = c.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        return tuple("linear_attention" if "linear" in str(t) else "full_attention" for t in types)
    interval = c.get("full_attention_interval")
    if interval and c.get("linear_num_value_heads"):
        return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n))
    return ("full_attention",) * n


def arch_from_config(cfg: dict[str, Any]) -> ModelArch:
    """Build a `ModelArch` from a parsed config.json (flat or with `text_config`)."""
    c = _text_config(cfg)
    try:
        n = int(c["num_hidden_layers"])
        hidden = int(c["hidden_size"])
        heads = int(c["num_attention_heads"])
    except KeyError as e:
        raise ModelDirError(
            f"config.json lacks {e.args[0]!r}: is this a decoder-only language model?"
        ) from None
    head_dim = int(c.get("head_dim") or hidden // heads)
    types = _layer_types(c, n)
    linear = None
    if "linear_attention" in types:
        linear = LinearAttention(
            num_v_heads=int(c.get("linear_num_value_heads", 0)),
            num_k_heads=int(c.get("linear_num_key_heads", 0)),
            k_head_dim=int(c.get("linear_key_head_dim", 128)),
            v_head_dim=int(c.get("linear_value_head_dim", 128)),
            conv_kernel=int(c.get("linear_conv_kernel_dim", 4)),
        )
    mtp = int(c.get("mtp_num_hidden_layers") or c.get("num_nextn_predict_layers") or 0)
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    return ModelArch(
        model_type=str(cfg.get("model_type") or c.get("model_type") or "unknown"),
        architectures=tuple(c.get("architectures") or ()),
        num_layers=n,
        hidden_size=hidden,
        intermediate_size=int(c.get("intermediate_size") or 4 * hidden),
        num_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        vocab_size=int(c.get("vocab_size", 0)),
        tie_embeddings=bool(c.get("tie_word_embeddings", False)),
        max_positions=c.get("max_position_embeddings"),
        dtype=dtype,
        layer_types=types,
        linear=linear,
        kv_lora_rank=c.get("kv_lora_rank"),
        qk_rope_head_dim=c.get("qk_rope_head_dim"),
        num_experts=int(c.get("num_experts") or c.get("n_routed_experts") or 0),
        experts_per_token=int(c.get("num_experts_per_tok") or 0),
        moe_intermediate_size=int(c.get("moe_intermediate_size") or 0),
        shared_experts=int(
            c.get("n_shared_experts") or (1 if c.get("shared_expert_intermediate_size") else 0)
        ),
        dense_layers=int(c.get("first_k_dense_replace") or 0),
        mtp_layers=mtp,
        attn_output_gate=bool(c.get("attn_output_gate", False)),
        vision_params=_vision_params(cfg.get("vision_config")),
        extra=cast(MlaProjections, {k: c[k] for k in MLA_PROJECTIONS if k in c}),
    )


def _vision_params(v: Any) -> int:
    """Parameters of a ViT vision tower from its config (0 without one): per block the attention's
    four projections and a two-matrix MLP, the patch and position embeddings, and the merger into the
    LM's width (Qwen-VL's: spatial_merge_size^2 patches, two linear layers)."""
    if not isinstance(v, dict) or not v.get("hidden_size"):
        return 0
    h, depth = int(v["hidden_size"]), int(v.get("depth") or v.get("num_hidden_layers") or 0)
    mlp = int(v.get("intermediate_size") or 4 * h)
    patch = (
        int(v.get("in_channels", 3))
        * int(v.get("temporal_patch_size", 1))
        * int(v.get("patch_size", 14)) ** 2
    )
    merged = h * int(v.get("spatial_merge_size", 1)) ** 2
    out = int(v.get("out_hidden_size") or h)
    blocks = depth * (4 * h * h + 2 * h * mlp)
    return (
        blocks + patch * h + int(v.get("num_position_embeddings") or 0) * h + merged * merged + merged * out
    )


def load_arch(model_dir: Path) -> ModelArch:
    """Read `<model_dir>/config.json` into a `ModelArch`, with a clear error when it is not there."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ModelDirError(
            f"{model_dir} has no config.json: point model.path at a Hugging Face model directory"
        )
    try:
        return arch_from_config(json.loads(path.read_text()))
    except json.JSONDecodeError as e:
        raise ModelDirError(f"{path} is not valid JSON ({e}); re-download the model's config") from None
