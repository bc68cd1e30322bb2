# One entry point for newcomers and CI. Everything installs itself into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
DEMO   := demo-data

.PHONY: install test lint demo lab bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(STAMP)

lint: install
	$(BIN)/ruff check audit tests benchmarks
	$(BIN)/ruff format --check audit tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/audit demo --out $(DEMO)

$(VENV)/.installed-lab: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,lab]'
	touch $@

# JupyterLab refuses to start as root without --allow-root (containers often run as root).
lab: $(VENV)/.installed-lab
	$(BIN)/jupyter lab notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

bench: install
	$(BIN)/python benchmarks/bench_store.py verify --records 200000 --runs 3

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .ruff_cache build *.egg-info
