"""The embedded demo and its stand-ins: a tiny local model and tokenizer built without any download,
synthetic datasets in the six seed schemas, and a small tokenizer for tests and benchmarks."""
