# The two commands of the README: `make up` runs the platform, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
DEMO ?= 1
PYTEST_ARGS ?=

STAMP := $(VENV)/.installed

.PHONY: up test lint typecheck check clean-venv

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	@touch $@

up: $(STAMP)
	$(VENV)/bin/tenantry up $(if $(filter 1,$(DEMO)),--demo,)

test: $(STAMP)
	scripts/install-system-packages
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck test

clean-venv:
	rm -rf $(VENV)
