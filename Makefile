# Two commands do everything on a fresh machine:  make run  and  make test
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export PREFECT_HOME ?= $(CURDIR)/.prefect

.PHONY: install lock run test test-seconds bytecode-tests bytecode-deps docs-check lint docs bench pretrain clean

# torch first (the CPU wheel on these machines; see README), then requirements.lock in two pip processes side by side
# (infra/install_lock.py: no resolution left to do), then the project itself. Where the lock cannot install (another
# platform), pip's resolver with constraints.txt does it, and TorchRec comes without its CUDA dependencies.
$(STAMP): pyproject.toml constraints.txt requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --no-compile torch==2.13.0
	$(PY) infra/install_lock.py requirements.lock --jobs 2 || \
	  { $(PIP) install -q --no-compile -c constraints.txt -e '.[dev,torchrec,s3]' && \
	    $(PIP) install -q --no-compile --no-deps torchrec==1.9.2; }
	$(PIP) install -q --no-compile --no-deps -e .
	touch $(STAMP)

# Write requirements.lock again: pip's resolver with constraints.txt in a fresh venv, then pip freeze (run it after a
# change to the dependencies in pyproject.toml or constraints.txt; tests/test_lock.py says when)
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q --no-compile torch==2.13.0
	.lock-venv/bin/python -m pip install -q --no-compile -c constraints.txt '.[dev,torchrec,s3]'
	.lock-venv/bin/python -m pip install -q --no-compile --no-deps torchrec==1.9.2
	{ sed -n '1,3p' requirements.lock; .lock-venv/bin/python -m pip freeze | grep -iv '^dreamshard'; } > .lock-venv/lock
	mv .lock-venv/lock requirements.lock && rm -rf .lock-venv

# Bytecode is written (into .venv and the checkout's git- and DVC-ignored __pycache__/): these machines set
# PYTHONDONTWRITEBYTECODE, under which every `dreamshard` process (each DVC stage, each CLI test) compiled the
# package from source again and every pytest process re-rewrote the asserts of all test modules (14 s -> 8 s a
# collection). The first process to import a module writes its bytecode (the serial timing tests, the first stage).
unexport PYTHONDONTWRITEBYTECODE

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dreamshard pipeline run --workspace runs/pipeline --export-model models

# Style and types (configured in pyproject.toml): ruff's lint and format check, mypy on the library
lint: $(STAMP)
	$(VENV)/bin/ruff check dreamshard flows tests bench
	$(VENV)/bin/ruff format --check dreamshard flows tests bench
	$(VENV)/bin/mypy

# First the single-core steps side by side (lint, the bytecode, the docs build); then the timing tests alone (no
# server, no second worker loading the cores); then the rest on 2 workers (a test file stays on one worker, and the
# files using the session's Prefect server share one: tests/conftest.py, PREFECT_SERVER_FILES).
test: $(STAMP)
	$(MAKE) --no-print-directory -j4 lint bytecode-tests bytecode-deps docs-check
	$(VENV)/bin/python -m pytest -m timing $(TIMING_TESTS)
	$(VENV)/bin/python -m pytest -m "not timing" -n 2 --dist loadfile --no-loadscope-reorder --durations=15

# The files holding the tests marked `timing` (tests/test_suite_schedule.py checks the list): the timing step
# collects these alone, not the whole suite.
TIMING_TESTS := tests/test_profiling_comm.py tests/test_profiling_oracle.py tests/test_drift_paired.py

# The bytecode of what the tests import, written once, in two jobs (the venv is installed with --no-compile, and a
# clean clone has none for its own modules): otherwise the first test step compiled torch, TorchRec and Prefect's
# server on one core, and both xdist workers compiled what they imported first at the same time.
bytecode-tests: $(STAMP)
	$(PY) -m pytest --collect-only -q -p no:cacheprovider >/dev/null
bytecode-deps: $(STAMP)
	$(PY) -c "import torch, torchrec, matplotlib.pyplot, dvc.repo, prefect.server.api.server, prefect.workers.process"

# The docs build into a temporary directory (--strict: a broken link or a page outside the nav fails it)
docs-check: $(STAMP)
	d=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d "$$d"; s=$$?; rm -rf "$$d"; exit $$s

# Record each test file's seconds from the last full run (pytest's cache) into tests/file_seconds.json: a clean
# clone schedules the longest files first by it (tests/conftest.py). Refresh it when a file's time changes a lot.
test-seconds: $(STAMP)
	$(PY) -c "import sys; sys.path.insert(0, 'tests'); import conftest; conftest.write_recorded_seconds()"

# The documentation site (mkdocs.yml, pages under docs/) into site/; --strict: a broken link fails it
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Plan quality on inventories the model never saw (quiet machine; see bench/generalisation.py)
bench: $(STAMP)
	$(VENV)/bin/python bench/generalisation.py --part a
	$(VENV)/bin/python bench/generalisation.py --part a --interconnect fast
	$(VENV)/bin/python bench/generalisation.py --part b

# Pre-train a model on the wide table generator (params `pretrain`; about 25 minutes on 2 cores), then the release
# gate (params `release`; ~15 minutes): it replaces dreamshard/pretrained only if it wins; else exit 1, unchanged
pretrain: $(STAMP)
	$(VENV)/bin/dreamshard pretrain --params params.yaml --out runs/pretrain-candidate --state-dir runs/pretrain
	$(VENV)/bin/dreamshard release runs/pretrain-candidate --into dreamshard/pretrained --params params.yaml

clean:
	rm -rf $(VENV) runs .prefect
