# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo needs only the CLI's extra; the tests need the tools too (mypy, ruff, dask...).
DEMO_STAMP := $(VENV)/.installed-cli
STAMP := $(VENV)/.installed-test

.PHONY: demo test lint typecheck unit clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[cli]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,cli]'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sandboxkit demo

lint: $(STAMP)
	$(BIN)/ruff check sandboxkit tests benchmarks
	$(BIN)/ruff format --check sandboxkit tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy --strict sandboxkit

unit: $(STAMP)
	$(BIN)/python -m pytest -W error -q

test: lint typecheck unit

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
