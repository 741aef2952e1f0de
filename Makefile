# EvoTrainer: `make demo` runs an autonomous session on the bundled demo harness; `make test` runs everything.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit services sandbox-image migrations-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev,verl]" torch==2.13.0
	touch $(STAMP)

services:
	@bash .ci/services.sh >/dev/null

sandbox-image: $(STAMP) services
	$(BIN)/evotrainer sandbox build

# The demo runs unattended: no human gates, no escalation to gated mode (see `evotrainer run --help`).
demo: $(STAMP) services sandbox-image
	$(BIN)/evotrainer run --escalate-after 0

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test: $(STAMP) lint typecheck sandbox-image
	eval "$$(bash .ci/services.sh | tail -n 1)" && EVOTRAINER_REQUIRE_SERVICES=1 $(BIN)/pytest -q tests

migrations-check: $(STAMP)
	$(BIN)/alembic upgrade head && $(BIN)/alembic check

clean:
	rm -rf $(VENV) .evotrainer .pytest_cache .mypy_cache .ruff_cache
