# The two promises of the README: `make demo` and `make test`, from a fresh clone.
# Every test target runs legs of tox.ini, the one definition of what CI runs (CONTRIBUTING.md);
# tox itself lives in .venv, and its envs in .tox are reused from run to run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TOX := $(BIN)/tox
SDK_VENV ?= .venv-sdk
DATAROBOT_SDK_PYTHON ?= $(abspath $(SDK_VENV))/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: help demo dev test test-quick lint type docs docs-serve test-lowest test-latest \
	test-newest test-postgres test-e2e test-e2e-newest test-reliability tox sdk-venv bench clean

help:
	@echo "make demo          - install the example project and serve it at http://$(HOST):$(PORT)/"
	@echo "make test          - tox: lint, type, docs, the suite on the lowest stack, the boundary on the newest pydantic-ai"
	@echo "make test-quick    - the suite without coverage, stopping at the first failure (TESTS=... for a part)"
	@echo "make test-newest   - tox: the suite under Python 3.13, the newest Django 6 and pydantic-ai"
	@echo "make test-postgres - tox: the suite on PostgreSQL (DATABASE_URL, default a local server)"
	@echo "make test-e2e      - tox: Chromium, @ag-ui/client, uvicorn and the official SDK"
	@echo "make test-e2e-newest - tox: the browser and @ag-ui/client flows on the newest stack"
	@echo "make test-reliability - tox: faults, disconnects, hostile input, two workers, crashes"
	@echo "make dev           - everything in .venv, for an editor and for running pytest by hand"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install whenever pyproject.toml changes.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,harness,docs,example]'
	touch $@

$(VENV)/.installed-example: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[example]'
	touch $@

$(VENV)/.installed-tox: | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'tox>=4.11'
	touch $@

tox: $(VENV)/.installed-tox

# The official DataRobot SDK in a venv of its own (it pins ag-ui-protocol<1): tests/sdk_check.
$(SDK_VENV)/.installed: tests/sdk_check/requirements.txt
	$(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/python -m pip install --quiet -r tests/sdk_check/requirements.txt
	touch $@

sdk-venv: $(SDK_VENV)/.installed

demo: $(VENV)/.installed-example
	cd example_project && ../$(BIN)/python manage.py migrate --noinput
	cd example_project && ../$(BIN)/python manage.py ensure_demo_user --base-url http://$(HOST):$(PORT)
	cd example_project && ../$(BIN)/uvicorn example_project.asgi:application --host $(HOST) --port $(PORT) --lifespan on

dev: $(VENV)/.installed-test

# tox's default env_list: lint, type, docs, lowest, latest.
test: tox
	$(TOX) run

# The lowest leg's suite without coverage, on both cores, stopping at the first failure; TESTS
# narrows it (make test-quick TESTS=tests/contrib/store).
TESTS ?=
test-quick: tox
	$(TOX) run -e lowest -- --no-cov -x -q $(TESTS)

lint type docs: tox
	$(TOX) run -e $@

docs-serve: tox
	$(TOX) run -e docs --notest
	.tox/docs/bin/mkdocs serve

test-lowest: tox
	$(TOX) run -e lowest

test-latest: tox
	$(TOX) run -e latest

test-postgres: tox
	$(TOX) run -e postgres

# Django 6 needs Python >= 3.12: Debian 12 has 3.11 only, the machine image's pyenv has 3.13
# (any python3.13 on PATH does too).
PY313_DIR ?= $(dir $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13)))
WITH_PY313 := $(if $(PY313_DIR),PATH="$(PY313_DIR):$$PATH")
test-newest: tox
	$(WITH_PY313) $(TOX) run -e newest

# The npm packages of tests/e2e/js, again whenever its package-lock.json changes.
tests/e2e/js/node_modules/.package-lock.json: tests/e2e/js/package-lock.json
	cd tests/e2e/js && npm ci --no-audit --no-fund --silent

# Slow end-to-end tests: Chromium, @ag-ui/client under Node, uvicorn, the official SDK.
test-e2e: tox $(SDK_VENV)/.installed tests/e2e/js/node_modules/.package-lock.json
	DATAROBOT_SDK_PYTHON=$(DATAROBOT_SDK_PYTHON) $(TOX) run -e e2e

test-e2e-newest: tox tests/e2e/js/node_modules/.package-lock.json
	$(WITH_PY313) $(TOX) run -e e2e-newest

# The reliability suite: each test prints its figure (docs/reliability.md explains them).
test-reliability: tox tests/e2e/js/node_modules/.package-lock.json
	$(TOX) run -e reliability

# Every suite of bench/ (0.28.3 and django-ag-ui 0.70 in venvs of their own, made on first use),
# written into docs/benchmarks.md. REDIS_URL and POSTGRES_URL add the two-worker cancel and the
# sweeper on PostgreSQL. BENCH_ARGS are the sizes (docs/benchmarks.md says why they are these).
BENCH_ARGS ?= --threads 10000 --orphans 1000 --samples 20 --runs 2000 --streams 15
bench: $(VENV)/.installed-test
	$(BIN)/python -m bench $(BENCH_ARGS) --write docs/benchmarks.md

clean:
	rm -rf $(VENV) $(SDK_VENV) .tox .coverage htmlcov .pytest_cache .mypy_cache .ruff_cache

# The wheel as a user gets it: built, twine-checked, installed into a fresh virtualenv, and
# Getting started and the chat page run from it (tests/e2e/test_wheel.py; Node and Chromium).
.PHONY: test-wheel
test-wheel: tox tests/e2e/js/node_modules/.package-lock.json
	$(TOX) run -e wheel
