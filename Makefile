# The two promises of the README: `make demo` and `make test`, from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: help demo test lint type docs test-postgres test-e2e bench clean

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

demo: $(VENV)/.installed-example
	cd example_project && ../$(BIN)/python manage.py migrate --noinput
	cd example_project && ../$(BIN)/python manage.py ensure_demo_user
	cd example_project && ../$(BIN)/uvicorn example_project.asgi:application --host $(HOST) --port $(PORT)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

type: $(VENV)/.installed-test
	$(BIN)/mypy django_pydantic_agent

docs: $(VENV)/.installed-test
	$(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

test: lint type docs
	$(BIN)/python -m django makemigrations --check --dry-run --settings=tests.settings
	$(BIN)/python -m pytest --cov --cov-report=term

# The same suite against PostgreSQL (DATABASE_URL must point at a server).
test-postgres: $(VENV)/.installed-test
	$(BIN)/python -m pytest -p no:cacheprovider

# Slow end-to-end tests: Chromium, @ag-ui/client under Node, uvicorn.
test-e2e: $(VENV)/.installed-test
	cd tests/e2e/js && npm ci --no-audit --no-fund --silent
	$(BIN)/python -m pytest -m e2e -p no:cacheprovider

bench: $(VENV)/.installed-test
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .coverage htmlcov .pytest_cache .mypy_cache .ruff_cache
