# robot-rl: two commands do everything (set-up included).
#   make demo   create .venv, install, train quadrotor-hover to its quality bar (<= 5 min), evaluate, export ONNX
#   make test   create .venv, install test tools (and the ARM toolchain + QEMU from apt), then ruff + mypy + pytest
# Re-running is fast: the install step is skipped while pyproject.toml is unchanged.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.robot-rl-installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export HF_HUB_OFFLINE := 1

.PHONY: demo test lint bench install system-deps clean

# Debian packages the firmware tests need: the ARM cross compiler, its C library, and QEMU for the Cortex-M4F.
APT_PACKAGES := gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first, by pip and pinned: an unpinned torch pulls several GB of CUDA wheels, and pip reads this
# machine's own configuration, where the CPU wheel is found. The project and its test tools then install with uv
# (from PyPI, into the same venv; pyproject.toml's torch==2.13.0 keeps that torch): a fresh venv's whole install took
# 41 s instead of 115 s with pip alone, empty caches (bench/setup_time.py). pip is the fallback where uv cannot be
# installed or fails. Neither compiles bytecode ahead (pip's --no-compile): Python compiles a module when it is first
# imported. uv is pinned like torch: the release the install's figures and the venvs they were checked against came
# from (a newer uv may resolve differently; bench/setup_time.py installs the same pin).
UV_PIN := uv==0.13.9
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --no-compile torch==2.13.0
	$(BIN)/pip install -q $(UV_PIN) && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]' \
	  || $(BIN)/pip install -q --no-compile -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/robot-rl train quadrotor-hover

# isaacgym-stubs' gymapi.pyi as mypy can parse it: the stub names two properties `lambda`, a Python keyword (pyright
# tolerates it, mypy stops); written next to our own typings/isaacgym/ stubs, renamed, from the installed package.
ISAACGYM_STUB := typings/isaacgym/gymapi.pyi
$(ISAACGYM_STUB): $(STAMP)
	sed 's/def lambda(/def lambda_(/' "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/isaacgym-stubs/gymapi.pyi" > $@.tmp
	mv $@.tmp $@

lint: $(STAMP) $(ISAACGYM_STUB)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Idempotent: nothing is installed when the tools are already there.
system-deps:
	@command -v arm-none-eabi-gcc >/dev/null && command -v qemu-system-arm >/dev/null \
	  && [ -f /usr/lib/arm-none-eabi/newlib/thumb/v7e-m+fp/hard/librdimon.a ] \
	  || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES); }

test: lint system-deps
	OMP_WAIT_POLICY=PASSIVE $(BIN)/pytest -n 2 --dist loadgroup --durations=15

bench: $(STAMP)
	$(BIN)/python bench/env_steps.py
	$(BIN)/python bench/time_to_criterion.py
	$(BIN)/python bench/sb3_baseline.py
	$(BIN)/python bench/mujoco_steps.py --mjwarp

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
