"""ModelSpec: the architecture facts of a decoder-only transformer that planning needs."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from shardplan.contracts.common import AttentionDType, Contract, DType

__all__ = ["ModelSpec", "MoESpec", "MLASpec", "AttentionKind", "WeightComponent", "WEIGHT_COMPONENTS"]

AttentionKind = Literal["full", "sliding"]

WeightComponent = Literal["attention", "dense_ffn", "shared_experts", "experts", "router", "lm_head", "mtp"]
"""Parts of a model whose weights a checkpoint may store in a format of their own: the attention projections,
the FFN of dense layers, the shared and the routed experts of MoE layers, the router, the LM head, and the
multi-token-prediction layers (the whole block). Quantized checkpoints list the modules they leave out of
quantization by these names (ModelOpt's ``exclude_modules``: ``self_attn``, ``shared_experts``, ``gate``,
``lm_head``, the MTP layer's index); AIConfigurator prices routed experts (``moe_quant_mode``) apart from the
other GEMMs (``gemm_quant_mode``) and reads a checkpoint's attention exclusions."""
WEIGHT_COMPONENTS: tuple[WeightComponent, ...] = get_args(WeightComponent)


class MLASpec(Contract):
    """Multi-head latent attention (DeepSeek-V2/V3): K/V are cached as one compressed latent per token."""

    q_lora_rank: int | None = Field(
        description="Rank of the query down-projection; None when queries are not compressed."
    )
    kv_lora_rank: int = Field(ge=1, description="Width of the compressed KV latent that is cached per token.")
    qk_nope_head_dim: int = Field(ge=1, description="Per-head query/key width without rotary embedding.")
    qk_rope_head_dim: int = Field(
        ge=0, description="Per-head query/key width carrying rotary embedding (cached once, shared by heads)."
    )
    v_head_dim: int = Field(ge=1, description="Per-head value width.")


class MoESpec(Contract):
    """Mixture-of-experts feed-forward layers with top-k routing."""

    num_experts: int = Field(ge=2, description="Routed experts per MoE layer.")
    experts_per_token: int = Field(ge=1, description="Top-k: routed experts each token activates.")
    expert_intermediate_size: int = Field(ge=1, description="Hidden width of one routed expert's FFN.")
    num_shared_experts: int = Field(
        default=0, ge=0, description="Experts every token passes through (DeepSeek, Qwen2-MoE)."
    )
    shared_expert_intermediate_size: int = Field(default=0, ge=0, description="Hidden width of one shared expert.")
    first_dense_layers: int = Field(
        default=0, ge=0, description="Leading layers that use a dense FFN instead of MoE (DeepSeek-V3: 3)."
    )
    expert_bias: bool = Field(default=False, description="Whether expert projections carry biases (gpt-oss).")


class ModelSpec(Contract):
    """A decoder-only transformer, read from a Hugging Face ``config.json``.

    Sizes follow the Hugging Face names; derived quantities (parameters, KV bytes, FLOPs) are plain
    functions in :mod:`shardplan.contracts.arithmetic.model_math`.
    """

    name: str = Field(description="Hugging Face repository id or the path the config was read from.")
    architecture: str = Field(
        description="The config's model_type (llama, qwen3, qwen3_moe, mixtral, deepseek_v3, gpt_oss)."
    )
    hidden_size: int = Field(ge=1, description="Residual stream width.")
    num_layers: int = Field(ge=1, description="Transformer blocks.")
    num_attention_heads: int = Field(ge=1, description="Query heads.")
    num_kv_heads: int = Field(
        ge=1, description="Key/value heads (GQA); equal to the query heads for MHA; 1 latent for MLA."
    )
    head_dim: int = Field(ge=1, description="Per-head query/key width (MLA: nope + rope width).")
    intermediate_size: int = Field(ge=1, description="Hidden width of the dense FFN (dense layers of MoE models too).")
    vocab_size: int = Field(ge=1, description="Vocabulary size (rows of the embedding and the LM head).")
    tie_word_embeddings: bool = Field(default=False, description="Whether the LM head shares the embedding matrix.")
    gated_mlp: bool = Field(default=True, description="SwiGLU-style FFN with gate and up projections (3 matrices).")
    attention_bias: bool = Field(default=False, description="Whether Q/K/V/O projections carry biases.")
    qk_norm: bool = Field(default=False, description="Per-head RMSNorm on queries and keys (Qwen3).")
    attention_sinks: bool = Field(default=False, description="Learned per-head attention sink logits (gpt-oss).")
    sliding_window: int | None = Field(
        default=None, ge=1, description="Window of sliding-window attention layers, in tokens."
    )
    layer_types: list[AttentionKind] = Field(description="Attention kind of each layer, in order; length num_layers.")
    mla: MLASpec | None = Field(default=None, description="Latent attention parameters; None for MHA/GQA.")
    moe: MoESpec | None = Field(default=None, description="Mixture-of-experts parameters; None for dense models.")
    max_position_embeddings: int = Field(default=131072, ge=1, description="Longest supported context.")
    mtp_layers: int = Field(
        default=0,
        ge=0,
        description="Multi-token-prediction layers the checkpoint ships after the main ones (the config's "
        "num_nextn_predict_layers; DeepSeek-V3: 1): speculative decoding's mtp drafter. 0: none.",
    )
    weight_dtype: DType = Field(default="bf16", description="Storage format of the weights.")
    expert_dtype: DType | None = Field(
        default=None, description="Storage format of routed-expert weights when it differs (gpt-oss: MXFP4 experts)."
    )
    weight_formats: dict[WeightComponent, DType] = Field(
        default_factory=dict,
        description="Storage format of the other parts whose weights differ from weight_dtype (NVIDIA's FP4 "
        "DeepSeek-R1: attention and the MTP layer in bf16); routed experts are expert_dtype's.",
    )
    kv_dtype: DType = Field(default="bf16", description="Storage format of the KV cache.")
    attention_dtype: AttentionDType = Field(
        default="bf16",
        description="Format attention's matrix products run in: bf16, or fp8 where the engine's kernels quantise the "
        "queries and multiply the FP8 KV cache on FP8 tensor cores (FlashMLA's FP8 decode kernel, TensorRT-LLM's FP8 "
        "context FMHA); needs kv_dtype fp8.",
    )
    activation_dtype: DType = Field(default="bf16", description="Format of activations and of communicated tensors.")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the config said that the spec does not model (architecture keys not understood).",
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries but num_layers={self.num_layers}")
        if "sliding" in self.layer_types and self.sliding_window is None:
            raise ValueError("layer_types names sliding layers but sliding_window is not set")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} does not divide num_attention_heads={self.num_attention_heads}"
            )
        if self.moe is not None and self.moe.experts_per_token > self.moe.num_experts:
            raise ValueError(
                f"experts_per_token={self.moe.experts_per_token} exceeds num_experts={self.moe.num_experts}"
            )
        if "experts" in self.weight_formats:
            raise ValueError("weight_formats holds no 'experts': the routed experts' format is expert_dtype")
        if self.attention_dtype == "fp8" and self.kv_dtype != "fp8":
            raise ValueError(f"attention_dtype fp8 multiplies an FP8 KV cache, but kv_dtype is {self.kv_dtype}")
        return self

    def weight_format(self, component: WeightComponent) -> DType:
        """The storage format of ``component``'s weights: its own where it has one, else ``weight_dtype``."""
        if component == "experts":
            return self.expert_dtype or self.weight_dtype
        return self.weight_formats.get(component, self.weight_dtype)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def is_moe_layer(self, layer: int) -> bool:
        """Whether ``layer`` (0-based) has a mixture-of-experts FFN."""
        return self.moe is not None and layer >= self.moe.first_dense_layers
