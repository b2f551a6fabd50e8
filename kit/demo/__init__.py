"""The embedded demo: a tiny local model and tokenizer built without any download."""
