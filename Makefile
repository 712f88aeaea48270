# Quick start: `make demo` and `make test`. Both bootstrap .venv on first use.
PYTHON ?= python3
VENV := .venv
TOOLS := .venv-tools
MINISTACK := .venv-ministack
CHECKOV_VERSION := 3.3.30
MINISTACK_VERSION := 1.5.33

# The venvs are installed with uv (a package installer from PyPI, in a venv of its own, at the
# version below): the project's from uv.lock, exactly (every package and version it names, no
# other), so that a run today and a run next month test the same libraries. `make lock`
# updates uv.lock after a change to pyproject.toml; `make lock-upgrade` moves every package to
# its newest allowed release (README, "Dependencies").
UV_VERSION := 0.13.9
UV_VENV := .venv-uv
UV := $(UV_VENV)/bin/uv
UV_STAMP := $(UV_VENV)/uv-$(UV_VERSION)

.PHONY: demo test test-fast lint audit lock lock-upgrade docs bench bench-nightly bench-backlog bench-bulk bench-arrays ministack browser screenshots clean

# $(call make_venv,DIR,PACKAGES): DIR as a venv holding PACKAGES (pip's syntax).
define make_venv
	$(UV) venv -q --allow-existing --python $(PYTHON) $(1) && \
	  $(UV) pip install -q --python $(1)/bin/python $(2)
endef

$(UV_STAMP):
	rm -rf $(UV_VENV)
	$(PYTHON) -m venv $(UV_VENV) && $(UV_VENV)/bin/pip install -q 'uv==$(UV_VERSION)'
	touch $@

# Redone whenever pyproject.toml or uv.lock changes. A lock that no longer matches
# pyproject.toml stops here, in one line, rather than install something else.
# The install is silent for a while on a first run: say what it is doing.
$(VENV): pyproject.toml uv.lock | $(UV_STAMP)
	@$(UV) lock --check -q 2>/dev/null || \
	  { echo "error: uv.lock does not match pyproject.toml: run \`make lock\`, then commit uv.lock" >&2; exit 1; }
	@echo "creating $(VENV) from uv.lock (first run, or pyproject.toml or uv.lock changed)..."
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync -q --frozen --all-extras --python $(PYTHON)
	@echo "$(VENV) is ready"
	touch $(VENV)

lock: | $(UV_STAMP)
	$(UV) lock

lock-upgrade: | $(UV_STAMP)
	$(UV) lock --upgrade

# checkov lives in its own venv: its pins clash with the project's (boto3, pydantic).
$(TOOLS)/bin/checkov: | $(UV_STAMP)
	$(call make_venv,$(TOOLS),'checkov==$(CHECKOV_VERSION)')

# MiniStack (local mode's SQS for deep queues, see dispatcher/local/ministack.py) pins its own
# botocore, so it too lives in a venv of its own.
$(MINISTACK)/bin/ministack: | $(UV_STAMP)
	$(call make_venv,$(MINISTACK),'ministack==$(MINISTACK_VERSION)')

ministack: $(MINISTACK)/bin/ministack

# Debian's Chromium and its own chromedriver, for the web console's browser test
# (tests/integration/test_console_browser.py): installed from Debian's packages where
# missing, never downloaded by a test tool at run time. As root, or through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium and chromium-driver (the console's browser test)..."; \
	  $(SUDO) apt-get update -q >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium chromium-driver \
	    >/dev/null && echo "chromium is installed"; }

# docs/console/*.png, the console's pages as the browser test walks them.
screenshots: $(VENV) browser
	LONGJOBS_SCREENSHOTS=docs/console $(VENV)/bin/pytest -q -n 0 tests/integration/test_console_browser.py

demo: $(VENV)
	$(VENV)/bin/longjobs demo

lint: $(VENV)
	$(VENV)/bin/ruff check dispatcher job_runner tests bench infra
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python infra/audit.py --if-reachable

# The locked runtime dependencies against known advisories (infra/audit.py; allowed ones in
# infra/audit-allowlist.txt, each with its date and reason). `make lint` runs it too, where OSV
# can be reached.
audit: $(VENV)
	$(VENV)/bin/python infra/audit.py

# docs/configuration.md's table is generated from dispatcher/settings.py (dispatcher/settings_page.py).
docs: $(VENV)
	$(VENV)/bin/python -m dispatcher.settings_page --update docs/configuration.md

# Every tier (tests/twins, tests/contract, tests/integration; docs/testing.md). Four
# pytest workers on two cores: much of the suite waits on subprocesses, moto and sleeps; each
# worker has its own moto server. The longest tests are dealt out first (tests/conftest.py)
# and handed out one at a time (tests/conftest.py's scheduler: by default xdist gives each
# worker a block of ~50 tests up front, which would put the longest ones on the same worker),
# except the modules whose costly module fixture should run once (SHARED_SETUP there).
# MiniStack is built too, so that its contract test runs in CI rather than skip, and Chromium
# installed (make browser) for the console's browser test.
# --durations: every run lists its 15 slowest tests, so the suite's time is seen where it goes.
# PYTHONDONTWRITEBYTECODE is emptied (a machine may set it): otherwise every worker and every
# process a test starts (runners, CLI commands, local mode) compiles moto, botocore and the
# project from source again, and pytest rewrites every test module's asserts in each worker.
test: $(VENV) $(TOOLS)/bin/checkov $(MINISTACK)/bin/ministack browser lint
	PYTHONDONTWRITEBYTECODE= LONGJOBS_CHECKOV=$(TOOLS)/bin/checkov \
	  $(VENV)/bin/pytest -q -n 4 --durations=15

# The twin tier alone, for the loop of changing code: in-process on the in-memory twins, no
# moto, no AWS endpoint, no lint. Two workers, one per core: this tier is all CPU. The two
# hypothesis machines run fewer examples than in `make test` (150 and 300).
test-fast: $(VENV)
	PYTHONDONTWRITEBYTECODE= LONGJOBS_MODEL_EXAMPLES=30 LONGJOBS_LIFECYCLE_EXAMPLES=60 \
	  $(VENV)/bin/pytest -q -n 2 tests/twins

bench: $(VENV)
	$(VENV)/bin/python bench/api_calls.py

# The seed's nightly batch scaled down (bench/nightly.py --help); SQS on MiniStack.
bench-nightly: $(VENV) $(MINISTACK)/bin/ministack
	$(VENV)/bin/python bench/nightly.py $(NIGHTLY_ARGS)

# A bulk cancel by filter of 10,000 jobs on moto: its peak RSS and calls per job (BULK_ARGS:
# another number of jobs, --per-bundle).
bench-bulk: $(VENV)
	$(VENV)/bin/python bench/bulk.py $(BULK_ARGS)

# An array job of 100,000 children end to end on the twins: calls per child, RSS (ARRAYS_ARGS:
# another number of children, --max-tasks).
bench-arrays: $(VENV)
	$(VENV)/bin/python bench/arrays.py $(ARRAYS_ARGS)

# The dispatcher's peak RSS admitting backlogs of 5,000 and 20,000 messages.
bench-backlog: $(VENV) $(MINISTACK)/bin/ministack
	$(VENV)/bin/python bench/nightly.py --backlog-only

clean:
	rm -rf $(VENV) $(TOOLS) $(MINISTACK) $(UV_VENV) .mypy_cache .ruff_cache .pytest_cache

# `sam build` (infra/template.yaml, BuildMethod: makefile) packages the functions with these,
# through infra/lambda/lambda_build.py: the layer LambdaDependencies holds the runtime
# dependencies (no extras: no CLI, no local mode), built once for all the functions; the layer
# ConsoleDependencies holds the extra console-app less those (the team console's function has
# both); each function holds the dispatcher package alone (the console's templates and static
# files with it). Everything is compiled to bytecode by a Python of the runtime's version
# (LAMBDA_RUNTIME, the template's Runtime), which the build looks for on this machine
# (LAMBDA_PYTHON names one). sam runs these with ARTIFACTS_DIR set, from a scratch copy of the
# resource's CodeUri: the helper finds the project by its own path.
LAMBDA_RUNTIME := python3.12
LAMBDA_BUILD := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))infra/lambda/lambda_build.py

build-LambdaDependencies:
	python3 $(LAMBDA_BUILD) layer "$(ARTIFACTS_DIR)" --runtime $(LAMBDA_RUNTIME)

build-ConsoleDependencies:
	python3 $(LAMBDA_BUILD) layer "$(ARTIFACTS_DIR)" --runtime $(LAMBDA_RUNTIME) --extra console-app

build-DispatcherFunction build-TaskEventFunction build-JobEventsFunction build-DependentsFunction:
	python3 $(LAMBDA_BUILD) code "$(ARTIFACTS_DIR)" --runtime $(LAMBDA_RUNTIME)

# The team console's functions (TeamConsole): the same package.
build-ConsoleFunction build-ConsoleTokenScopesFunction:
	python3 $(LAMBDA_BUILD) code "$(ARTIFACTS_DIR)" --runtime $(LAMBDA_RUNTIME)
