# Two entry points (see README.md): `make demo` and `make test`. Each sets up .venv itself.
# The tests come in two tiers: `make test` checks every mechanism cheaply (the command to run
# after each change); `make test-e2e` runs the end-to-end tier (tests marked e2e: paper-size
# compiles, repeated kill -9, multi-host, notebooks, full-size fine-tunes); `make test-all` both.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
WORKDIR ?= workdir/bert_tiny_demo
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export TF_CPP_MIN_LOG_LEVEL ?= 3

.PHONY: demo test test-unit test-e2e test-all bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: setup.py | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# torch first and pinned: the CPU build of 2.13.0 comes from a local wheel.
$(VENV)/.installed-test: setup.py $(VENV)/.installed
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test,tpu,beam,bench]"
	touch $@

demo: $(VENV)/.installed
	XLA_FLAGS= $(BIN)/bertjax-train --gin_file=configs/experiments/bert_tiny_demo.gin \
		--workdir=$(WORKDIR)
	XLA_FLAGS= $(BIN)/bertjax-fill-mask --checkpoint=$(WORKDIR)

# -p tests.schedule: files start longest first (tests/durations.json), so neither worker idles at the end.
PYTEST := $(BIN)/python -m pytest -q -ra --strict-markers --durations=15 -n 2 --dist loadfile \
	--no-loadscope-reorder -p tests.schedule

test: $(VENV)/.installed-test
	$(BIN)/ruff check bertjax tests benchmarks scripts
	$(BIN)/python scripts/check_types.py
	$(PYTEST) -m "not e2e"

# The unit tier, under 2 minutes on 2 idle cores: tests marked `unit` (layers, metrics,
# tokenizers, masks, records, configs; no model-sized compile). A marker, not a path list: the
# tier is declared beside each test, so a file can give it its cheap tests only; the markers
# `gpu` and `tpu` (pyproject.toml) mark tests that skip without that accelerator.
test-unit: $(VENV)/.installed-test
	$(PYTEST) -m "unit and not e2e"

test-e2e: $(VENV)/.installed-test
	$(PYTEST) -m e2e

# One pytest run for both tiers: the two workers share the long tests between them.
test-all: $(VENV)/.installed-test
	$(BIN)/ruff check bertjax tests benchmarks scripts
	$(PYTEST)

bench: $(VENV)/.installed-test
	XLA_FLAGS= $(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) workdir
