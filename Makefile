# The two commands of the README: `make up` runs the platform, `make test` runs the whole
# check: ruff, mypy --strict, the import contracts, every test, then the release gates.
PYTHON ?= python3
VENV ?= .venv
DEMO ?= 1
PYTEST_ARGS ?=
# The suite in two processes, a whole test file to each at a time (module fixtures stay
# shared, a file's tests keep their order): most of a test's time is spent waiting on real
# processes, so two processes on two cores finish sooner. TEST_PROCESSES=0 runs it in one.
TEST_PROCESSES ?= 2

STAMP := $(VENV)/.installed
# Exact versions and hashes of every third-party package of the venv: the application, its
# extras below and the test tools. pyproject.toml keeps ranges for library users; `make lock`
# re-resolves after they change (LOCK_ARGS=--upgrade: the newest each range allows).
LOCK := requirements.lock
EXTRAS := embedded,testing,test
UV_VERSION := 0.13.9
LOCK_ARGS ?=

.PHONY: up test gate lint typecheck contracts check schema reference clean-venv image bench lock

# The locked packages first (nothing else: every one pinned and hashed), then the two
# distributions of this checkout, editable, with no dependency of their own: `pip check`
# fails when pyproject.toml asks for something the lock lacks (then `make lock`).
$(STAMP): pyproject.toml clients/python/pyproject.toml $(LOCK)
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q --require-hashes -r $(LOCK)
	$(VENV)/bin/python -m pip install -q --no-deps --no-build-isolation \
		-e ./clients/python -e '.[$(EXTRAS)]'
	$(VENV)/bin/python -m pip check
	@touch $@

# uv resolves for every platform and Python the project supports; the checkout's two
# distributions are inputs, not outputs (they are installed editable above). Not after
# $(STAMP): that fails on the very change that needs a new lock.
lock:
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q uv==$(UV_VERSION)
	printf -- '-e ./clients/python\n-e .[$(EXTRAS)]\n' | $(VENV)/bin/uv pip compile - \
		--universal --python-version 3.11 --generate-hashes --quiet $(LOCK_ARGS) \
		--custom-compile-command "make lock" \
		--no-emit-package tenantry --no-emit-package tenantry-client -o $(LOCK)

# The microVM guest images (code, and browser: the same plus Chromium): built from Debian
# packages once, then a cached no-op.
image: $(STAMP)
	scripts/install-system-packages
	$(VENV)/bin/tenantry sandbox build-image

# `up` goes on without the image (the sandbox probe then picks gvisor or bwrap, and says
# so); `test` does not: the microVM tests must run.
up: $(STAMP)
	-scripts/install-system-packages
	-$(VENV)/bin/tenantry sandbox build-image
	$(VENV)/bin/tenantry up $(if $(filter 1,$(DEMO)),--demo,)

# The release gates of the design at full size (benchmarks/gate.py): 10,000 recorded runs
# replayed with 0 differences, 1,000 runs through SIGKILLed workers with every run finished
# and 0 repeated effects, 0 tool-rule escapes in either; a summary of their figures last.
GATE = $(VENV)/bin/python benchmarks/gate.py

# The static checks first: they take seconds, the suite minutes, the gates a few more.
test: image lint typecheck contracts
	$(VENV)/bin/python -m pytest -n $(TEST_PROCESSES) --dist loadfile $(PYTEST_ARGS)
	$(GATE)

# Its sandbox scenarios need bwrap and Chromium, which `image` installs.
gate: image
	$(GATE)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The layers of docs/reference/architecture.md ([tool.importlinter] in pyproject.toml).
contracts: $(STAMP)
	$(VENV)/bin/lint-imports

check: test

# Every benchmark in sequence, their JSON lines in one file under benchmarks/results/
# (`make bench BENCH="create_run fairness"` for some; the soak alone takes 30 minutes).
bench: $(STAMP)
	$(VENV)/bin/python benchmarks/all.py $(BENCH)

# Rewrites db/schema.sql from a freshly migrated database (after a new migration).
schema: $(STAMP)
	$(VENV)/bin/python -m tests.support.schema

# Rewrites the generated tables of docs/reference/configuration.md and cli.md from the
# variables' declarations (src/tenantry/config/variables/) and the commands that take them.
reference: $(STAMP)
	$(VENV)/bin/python -m tenantry.cli.reference

clean-venv:
	rm -rf $(VENV)
