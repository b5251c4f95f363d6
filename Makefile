# robot-rl: two commands do everything (set-up included).
#   make demo   create .venv, install, train quadrotor-hover to its success criterion, evaluate, export ONNX
#   make test   create .venv, install test tools, then ruff + mypy + pytest
# Re-running is fast: the install step is skipped while pyproject.toml is unchanged.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.robot-rl-installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export HF_HUB_OFFLINE := 1

.PHONY: demo test lint bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned: an unpinned torch pulls several GB of CUDA wheels.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/robot-rl train quadrotor-hover

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	OMP_WAIT_POLICY=PASSIVE $(BIN)/pytest -n 2 --durations=15

bench: $(STAMP)
	$(BIN)/python bench/env_steps.py
	$(BIN)/python bench/time_to_criterion.py
	$(BIN)/python bench/sb3_baseline.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
