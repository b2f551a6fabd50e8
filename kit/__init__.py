"""kit: batch inference with SGLang / vLLM / transformers serve, and the evidence to decide on
speculative decoding. Stages: kit.stages (probe, decide, generate, analyse); params: kit.params."""

__version__ = "0.1.0"
