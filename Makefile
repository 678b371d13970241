PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest demo bench bench-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,yaml,prometheus]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check apf_limiter tests benchmarks examples
	$(BIN)/ruff format --check apf_limiter tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict apf_limiter tests

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

demo: $(STAMP)
	$(BIN)/apf-limiter demo

bench-deps: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,yaml,prometheus,bench]'

bench: bench-deps
	$(BIN)/pytest benchmarks -q -p no:randomly --benchmark-only --benchmark-columns=min,median,iqr,rounds
	$(BIN)/python -m benchmarks.engine_bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
