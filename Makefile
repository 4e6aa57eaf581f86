# The two commands a newcomer needs: `make demo` and `make test`.
# `make test` is ruff, mypy, and the test matrix (noxfile.py: the suite on Python 3.11-3.13,
# at the lowest declared versions, and beside agent frameworks under uvloop); `make unit`
# is the suite once, in .venv, for a quick run while working.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo needs only the CLI's extra; the tests need the tools too (mypy, ruff, dask...).
DEMO_STAMP := $(VENV)/.installed-cli
STAMP := $(VENV)/.installed-test

.PHONY: demo test lint typecheck unit matrix clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[cli]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,cli]' 'nox>=2025.2.9' 'uv>=0.6'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sandboxkit demo

lint: $(STAMP)
	$(BIN)/ruff check sandboxkit tests benchmarks noxfile.py
	$(BIN)/ruff format --check sandboxkit tests benchmarks noxfile.py

typecheck: $(STAMP)
	$(BIN)/mypy --strict sandboxkit

unit: $(STAMP)
	$(BIN)/python -m pytest -W error -q

matrix: $(STAMP)
	$(BIN)/nox

test: lint typecheck matrix

clean:
	rm -rf $(VENV) .nox .mypy_cache .pytest_cache .ruff_cache
