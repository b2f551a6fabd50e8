"""A stand-in for SGLang in tests of the kit's SGLang integration (see launch_server.py)."""
