# One entry point for newcomers and CI. Everything installs itself into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
DEMO   := demo-data

.PHONY: install test test-oldest test-spark lint demo lab bench clean

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

# `make test-oldest`: the tests of the store, the engine and the frames against the oldest pandas,
# pyarrow and duckdb that pyproject.toml allows (each ">=" bound pinned with "==", derived from
# pyproject.toml), in a second environment, .venv-oldest. Not part of `make test` (its own install:
# minutes). docs/contributing.md, "The oldest versions".
OLDEST        := .venv-oldest
OLDEST_PINNED := pandas pyarrow duckdb
# (test_workbench.py last, as in `make test`'s order: audit.open leaves a thread running, and
# tests/test_store_history.py's fold beside the read then runs in the caller)
OLDEST_TESTS  := $(sort $(wildcard tests/test_store*.py)) tests/test_questions.py \
                 tests/test_analysis.py tests/test_load.py tests/test_tables.py \
                 tests/test_verify_arrow.py tests/test_workbench.py

define LOWER_BOUNDS
import re, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for name in sys.argv[1:]:
    spec = next(d for d in deps if re.match(re.escape(name) + r"\s*[<>=!~]", d))
    print(name + "==" + re.search(r">=\s*([^,;\s]+)", spec).group(1))
endef
export LOWER_BOUNDS

$(OLDEST)/constraints.txt: pyproject.toml
	mkdir -p $(OLDEST)
	$(PYTHON) -c "$$LOWER_BOUNDS" $(OLDEST_PINNED) > $@.tmp
	mv $@.tmp $@

$(OLDEST)/.installed: $(OLDEST)/constraints.txt
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install -q --upgrade pip
	$(OLDEST)/bin/python -m pip install -q -c $(OLDEST)/constraints.txt -e '.[dev]'
	touch $@

test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python -m pip list 2>/dev/null | grep -iE '^($(subst $() ,|,$(OLDEST_PINNED))) '
	$(OLDEST)/bin/python -m pytest -q $(OLDEST_TESTS)

# `make test-spark`: every rule of the analysis on DuckDB and on PySpark in local mode, row for
# row (tests/test_engines.py). Installs the `spark` extra into .venv; needs a Java runtime (17 or
# later): without one it says so in one line and skips. Not part of `make test` (Spark starts in
# seconds and needs Java). docs/scale.md, "The Spark engine".
test-spark: install
	@if ! command -v java >/dev/null 2>&1 && ! { [ -n "$$JAVA_HOME" ] && [ -x "$$JAVA_HOME/bin/java" ]; }; then \
		echo "test-spark: skipped: no Java runtime (install one, e.g. apt-get install openjdk-17-jre-headless)"; \
		exit 0; fi; \
	$(BIN)/python -m pip install -q -e '.[dev,spark]' && \
	AUDIT_TEST_SPARK=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_engines.py

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
	rm -rf $(VENV) $(OLDEST) $(DEMO) .pytest_cache .ruff_cache build *.egg-info
