# make demo | make test | make check: each creates .venv first when missing (Python 3.11+ only).
# The venv is reinstalled when pyproject.toml is newer than its stamp file.

PYTHON = python3
VENV = .venv
STAMP = $(VENV)/.cronbase-installed

.PHONY: demo test check screenshots

demo: $(STAMP)
	$(VENV)/bin/cronbase demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests

check: $(STAMP)
	$(VENV)/bin/ruff format --check src tests examples
	$(VENV)/bin/ruff check src tests examples
	$(VENV)/bin/mypy

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

screenshots: $(STAMP)
	CRONBASE_SCREENSHOTS=docs/screenshots $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/browser/test_screenshots.py
