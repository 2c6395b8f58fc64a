# The two promises of the README: `make demo` and `make test`, from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SDK_VENV ?= .venv-sdk
DATAROBOT_SDK_PYTHON ?= $(abspath $(SDK_VENV))/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: help demo test lint type docs test-postgres test-e2e sdk-venv bench clean

help:
	@echo "make demo   - install the example project and serve it at http://$(HOST):$(PORT)/"
	@echo "make test   - ruff, mypy, migrations check, docs build and pytest with coverage"

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

# The official DataRobot SDK in a venv of its own (it pins ag-ui-protocol<1): tests/sdk_check.
$(SDK_VENV)/.installed: tests/sdk_check/requirements.txt
	$(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/python -m pip install --quiet -r tests/sdk_check/requirements.txt
	touch $@

sdk-venv: $(SDK_VENV)/.installed

demo: $(VENV)/.installed-example
	cd example_project && ../$(BIN)/python manage.py migrate --noinput
	cd example_project && ../$(BIN)/python manage.py ensure_demo_user
	cd example_project && ../$(BIN)/uvicorn example_project.asgi:application --host $(HOST) --port $(PORT) --lifespan off

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

type: $(VENV)/.installed-test
	$(BIN)/mypy django_pydantic_agent

docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

test: lint type docs
	$(BIN)/python -m django makemigrations --check --dry-run --settings=tests.settings
	$(BIN)/python -m pytest --cov --cov-report=term

# The same suite against PostgreSQL (DATABASE_URL must point at a server).
test-postgres: $(VENV)/.installed-test
	$(BIN)/python -m pytest -p no:cacheprovider

# Slow end-to-end tests: Chromium, @ag-ui/client under Node, uvicorn, the official SDK.
test-e2e: $(VENV)/.installed-test $(SDK_VENV)/.installed
	cd tests/e2e/js && npm ci --no-audit --no-fund --silent
	DATAROBOT_SDK_PYTHON=$(DATAROBOT_SDK_PYTHON) $(BIN)/python -m pytest -m e2e -p no:cacheprovider

bench: $(VENV)/.installed-test
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(SDK_VENV) .coverage htmlcov .pytest_cache .mypy_cache .ruff_cache
