# EvoTrainer: `make demo` runs an autonomous session on the bundled demo harness; `make test` runs everything.
# The demo installs only what it runs (the package and CPU torch); the test target adds the dev and verl
# extras (pytest, ruff, mypy, langgraph-cli, verl, Ray, ...) on top of the same .venv.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint typecheck unit services demo-services sandbox-image models migrations-check clean

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e . torch==2.13.0
	touch $(DEMO_STAMP)

$(TEST_STAMP): $(DEMO_STAMP) pyproject.toml
	$(BIN)/pip install -q -e ".[dev,verl]" torch==2.13.0
	touch $(TEST_STAMP)

services:
	@bash .ci/services.sh >/dev/null

demo-services:
	@bash .ci/services.sh --docker-only >/dev/null

sandbox-image: $(DEMO_STAMP) demo-services
	$(BIN)/evotrainer sandbox build

# The pretrained model the tests load (docs/models.md): fetched once into the models cache, instant afterwards.
models: $(DEMO_STAMP)
	$(BIN)/evotrainer models get smollm2-135m-instruct

# The demo runs unattended: no human gates, no escalation to gated mode (see `evotrainer run --help`). With a
# CUDA device it trains the real pretrained SmolLM2 (examples/arithmetic-smollm2); on a CPU the tiny model.
# A first look fits in minutes: 2 iterations of 40-step runs (every phase of the loop, replicates included).
# `make demo FULL=1` runs the full-length campaign, the `evotrainer run` defaults (4 iterations, 60-step runs).
DEMO_BUDGET := --iterations 2 --base-steps 40 --pilot-steps 40 --max-steps 560
ifdef FULL
DEMO_BUDGET :=
endif
demo: $(DEMO_STAMP) demo-services sandbox-image
	@if $(BIN)/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		$(BIN)/evotrainer models get smollm2-135m-instruct >/dev/null && \
		$(BIN)/evotrainer run --escalate-after 0 $(DEMO_BUDGET) --harness examples/arithmetic-smollm2; \
	else \
		$(BIN)/evotrainer run --escalate-after 0 $(DEMO_BUDGET); \
	fi

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

unit: $(TEST_STAMP)
	$(BIN)/pytest -q tests/unit

test: $(TEST_STAMP) services lint typecheck sandbox-image models
	eval "$$(bash .ci/services.sh | tail -n 1)" && EVOTRAINER_REQUIRE_SERVICES=1 $(BIN)/pytest -q tests

migrations-check: $(TEST_STAMP)
	$(BIN)/alembic upgrade head && $(BIN)/alembic check

clean:
	rm -rf $(VENV) .evotrainer .pytest_cache .mypy_cache .ruff_cache
