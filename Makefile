# embedctl: `make demo` and `make test` are the whole set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
# Installed first so that no other requirement pulls the newest CUDA build (GBs) on a CPU machine.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
BIN := $(VENV)/bin
STAMP := $(VENV)/.embedctl-installed
PYTEST_ARGS ?=

.PHONY: install demo test lint bench docs clean-runs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# every C source and header of the optional kernels: an edit rebuilds them
KERNEL_SOURCES := $(wildcard embedctl/index/plaid/*.c embedctl/index/plaid/*.h)

$(STAMP): pyproject.toml setup.py $(KERNEL_SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	PATH="$(CURDIR)/$(BIN):$$PATH" bash demo/run.sh

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check embedctl tests bench
	$(BIN)/lint-imports --no-cache

# run_all.py ends with bench/plots.py and bench/summarize.py (bench/RESULTS.md)
bench: install
	$(BIN)/python bench/run_all.py $(if $(SCIFACT),--scifact $(SCIFACT),)

docs: install
	$(BIN)/embedctl config keys --markdown > docs/config-reference.md
	$(BIN)/python docs/make_troubleshooting.py
	$(BIN)/python bench/summarize.py
	$(BIN)/python docs/make_architecture.py --svg

clean-runs:
	rm -rf runs indexes
