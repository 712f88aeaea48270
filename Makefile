# Quick start: `make demo` and `make test`. Both bootstrap .venv on first use.
PYTHON ?= python3
VENV := .venv
TOOLS := .venv-tools
MINISTACK := .venv-ministack
CHECKOV_VERSION := 3.3.30
MINISTACK_VERSION := 1.5.33

.PHONY: demo test lint docs bench bench-nightly bench-backlog ministack clean

# Redone whenever pyproject.toml changes.
# pip -q is silent for a minute or more on a first run: say what it is doing.
$(VENV): pyproject.toml
	@echo "creating $(VENV) (first run, or pyproject.toml changed): about a minute..."
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	@echo "installing longjobs and its dependencies into $(VENV)..."
	$(VENV)/bin/pip install -q -e '.[dev]'
	@echo "$(VENV) is ready"
	touch $(VENV)

# checkov lives in its own venv: its pins clash with the project's (boto3, pydantic).
$(TOOLS)/bin/checkov:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q 'checkov==$(CHECKOV_VERSION)'

# MiniStack (local mode's SQS for deep queues, see dispatcher/local/ministack.py) pins its own
# botocore, so it too lives in a venv of its own (~20 s to build).
$(MINISTACK)/bin/ministack:
	$(PYTHON) -m venv $(MINISTACK)
	$(MINISTACK)/bin/pip install -q 'ministack==$(MINISTACK_VERSION)'

ministack: $(MINISTACK)/bin/ministack

demo: $(VENV)
	$(VENV)/bin/longjobs demo

lint: $(VENV)
	$(VENV)/bin/ruff check dispatcher job_runner tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# docs/configuration.md's table is generated from dispatcher/settings.py.
docs: $(VENV)
	$(VENV)/bin/python -m dispatcher.settings --update docs/configuration.md

# Four pytest workers on two cores: most of the suite waits on subprocesses, moto and sleeps,
# so this halves the run (about 13 min alone, 7 min so); each worker has its own moto server.
# MiniStack is built too, so that its contract test runs in CI rather than skip.
test: $(VENV) $(TOOLS)/bin/checkov $(MINISTACK)/bin/ministack lint
	LONGJOBS_CHECKOV=$(TOOLS)/bin/checkov $(VENV)/bin/pytest -q -n 4

bench: $(VENV)
	$(VENV)/bin/python bench/api_calls.py

# The seed's nightly batch scaled down (bench/nightly.py --help); SQS on MiniStack.
bench-nightly: $(VENV) $(MINISTACK)/bin/ministack
	$(VENV)/bin/python bench/nightly.py $(NIGHTLY_ARGS)

# The dispatcher's peak RSS admitting backlogs of 5,000 and 20,000 messages.
bench-backlog: $(VENV) $(MINISTACK)/bin/ministack
	$(VENV)/bin/python bench/nightly.py --backlog-only

clean:
	rm -rf $(VENV) $(TOOLS) $(MINISTACK) .mypy_cache .ruff_cache .pytest_cache

# `sam build` (infra/template.yaml, BuildMethod: makefile) packages both functions with this:
# the wheel without extras, so no CLI (typer, rich) and no local mode (moto) in the Lambda package.
# --no-compile: pip would otherwise write bytecode for the host's Python (not 3.12) into the
# package, which the Lambda runtime cannot use and which only makes the package bigger.
build-DispatcherFunction build-TaskEventFunction:
	W=$$(mktemp -d) && python3 -m pip wheel -q --no-deps -w "$$W" . && \
	python3 -m pip install -q --no-compile --target "$(ARTIFACTS_DIR)" \
	  --platform manylinux2014_x86_64 --implementation cp --python-version 3.12 \
	  --only-binary=:all: "$$W"/*.whl && rm -rf "$$W"
