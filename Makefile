# Two commands a new user needs: `make run` (dashboard with the sample runs loaded) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8501
MYPY   := $(BIN)/mypy -p gpuscope --ignore-missing-imports
# The store: the CLI's default (~/.local/share/gpuscope/store, or $GPUSCOPE_DB / $GPUSCOPE_STORE),
# so runs ingested from the command line show up in `make run` and the other way round.

# Python writes no bytecode cache when the environment asks it not to; every test process (and every
# `gpuscope` a test starts) would then compile the package again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast test-slow lint typecheck format docs bench bench-ui clean browser postgres

# PYTHONWARNINGS=ignore: setuptools' build backend announces the strict editable install (and its
# package-data notes) as warnings, a 20-line banner on every `make run` that re-installs; errors
# still show and still fail the target.
# editable_mode=strict: a tree of links under build/ that editors and type checkers follow (the
# default mode maps app/ to `gpuscope` through an import hook that no static tool reads). A file
# added or removed changes the manifest, which re-links the tree.
# ingest/_compiled_parser.c: pip compiles it (gcc) into the tree; an edit rebuilds it.
# The install depends on the list of the package's files (rewritten only when a file is added or
# removed), not on folder times: Python writing a __pycache__ folder would make a folder newer than
# the stamp, and a second `make run` would re-install for nothing.
MANIFEST := $(VENV)/.package-files
_manifest := $(shell mkdir -p $(VENV) && find app ingest analysis vocabulary store -name __pycache__ -prune -o -type f ! -name '*.so' ! -name '*.pyc' -print 2>/dev/null | LC_ALL=C sort > $(MANIFEST).new && { cmp -s $(MANIFEST).new $(MANIFEST) || mv $(MANIFEST).new $(MANIFEST); }; rm -f $(MANIFEST).new)
# --no-compile: pip would compile every module it installs to bytecode (about 18,000 files, 42 s
# of CPU here); the suite imports about 2,300 of them, which Python compiles at their first import
# and caches (PYTHONDONTWRITEBYTECODE is unexported above).
PIP_INSTALL := $(BIN)/pip install -q --no-compile
$(STAMP): pyproject.toml $(MANIFEST) ingest/_compiled_parser.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	PYTHONWARNINGS=ignore $(PIP_INSTALL) -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP)

# The capture helper's tests run a real (CPU) torch.profiler capture. PyPI's plain `torch` is a
# multi-GB CUDA build, so only a CPU build is installed: from a local wheel where the machine has one.
TORCH_CPU ?= torch==2.13.0+cpu
$(VENV)/.torch: $(STAMP)
	$(PIP_INSTALL) "$(TORCH_CPU)" || echo "gpuscope: no $(TORCH_CPU) wheel here; capture tests that need torch will be skipped"
	touch $@

run: $(STAMP)
	$(BIN)/gpuscope ui --port $(PORT) --load-samples

# Debian's chromium drives the browser tests (Playwright's own browser download needs the internet):
# its headless shell (the same engine without the desktop browser's windowing, less CPU a page)
# where installed (tests/e2e/e2e_support.chromium_path), chromium itself for `make run`'s readers.
browser:
	@{ command -v chromium && command -v chromium-headless-shell; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-headless-shell >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-headless-shell >/dev/null; fi; }

# Debian's PostgreSQL for the team-store tests (tests/team_servers.py starts its own server in a
# temp dir as an unprivileged user; the package's own cluster is not used).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; fi; }

# Lint and type-check run beside the tests (mypy first, the longest), each of the three whatever
# the others said; their output is held back and shown under a header once pytest is done.
# `make test` fails when pytest or any of them fails.
LINT := rc=0; $(MYPY) || rc=1; $(BIN)/ruff check . || rc=1; $(BIN)/ruff format --check . || rc=1; exit $$rc
PYTEST_ALL := $(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder -p no:cacheprovider
test: $(STAMP) $(VENV)/.torch browser postgres
	@echo '$(MYPY); $(BIN)/ruff check .; $(BIN)/ruff format --check .   (beside the tests)'
	@echo '$(PYTEST_ALL)'
	@lint_log=$$(mktemp); \
	( $(LINT) ) >"$$lint_log" 2>&1 & lint_pid=$$!; \
	$(PYTEST_ALL); tests=$$?; \
	wait $$lint_pid; lint=$$?; \
	echo "== lint and type-check (mypy, ruff check, ruff format --check): exit $$lint =="; \
	cat "$$lint_log"; rm -f "$$lint_log"; \
	[ $$tests -eq 0 ] || echo "make test: pytest failed (exit $$tests)" >&2; \
	[ $$lint -eq 0 ] || echo "make test: lint or type-check failed" >&2; \
	[ $$tests -eq 0 ] && [ $$lint -eq 0 ]

# The inner loop, under 90 s on 2 cores: every test but the browser and the `slow` ones (1 s or more
# each: real processes and servers, multi-run AppTest sessions), on every core (pytest-xdist).
# `benchmarks/bench_tests.py` times it and lists unmarked tests that have grown slow.
test-fast: $(STAMP) $(VENV)/.torch
	$(BIN)/ruff check .
	$(MYPY)
	$(BIN)/python -m pytest -q -m "not browser and not slow" -n auto -p no:cacheprovider

# The `slow` tier alone (no browser), in parallel: with test-fast, every non-browser test.
test-slow: $(STAMP) $(VENV)/.torch postgres
	$(BIN)/python -m pytest -q -m "slow and not browser" -n auto -p no:cacheprovider

# mypy over the installed package (through the strict editable tree, where it sees the package as
# users import it). Part of `make lint`, `make test` and `make test-fast`: a type error fails them.
typecheck: $(STAMP)
	$(MYPY)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MYPY)

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

docs: $(STAMP)
	$(BIN)/python -m gpuscope.store.schema > docs/schema.md

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_ingest.py
	$(BIN)/python benchmarks/bench_analysis.py

bench-ui: $(STAMP) browser
	$(BIN)/python benchmarks/bench_ui.py

clean:
	rm -rf $(VENV) data build *.egg-info
