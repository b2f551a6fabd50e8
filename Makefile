# The two commands a new user needs:  make demo   and   make test
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# CPU build of torch: a small local wheel here; a GPU box installs its own CUDA build first (see README).
TORCH  ?= torch==2.13.0

.PHONY: demo test venv lint clean-demo

$(BIN)/kit: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(BIN)/kit

venv: $(BIN)/kit

demo: $(BIN)/kit
	$(BIN)/kit demo-assets
	$(BIN)/kit run params/demo.yaml

test: $(BIN)/kit
	$(BIN)/python -m pytest -q

lint: $(BIN)/kit
	$(BIN)/ruff check kit tests benchmarks

clean-demo:
	rm -rf outputs/demo
