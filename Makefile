# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,cli]'
	touch $(STAMP)

demo: $(STAMP)
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
