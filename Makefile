# svc: two commands from a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test check lint types browser loadgen bench bench-scale soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/svc serve --bootstrap

# Headless Chromium for the page and dashboard tests (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; }

# wrk (Debian's package) for the tests that drive the real load generator.
loadgen:
	bash bench/setup.sh

test: $(STAMP) browser loadgen
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

types: $(STAMP)
	$(BIN)/mypy

check: lint types test

bench: $(STAMP) loadgen
	$(BIN)/python -m bench.harness

# The full scale run (1M links, 10M clicks; about 15 minutes), kept out of `make bench`.
bench-scale: $(STAMP) loadgen
	$(BIN)/python -m bench.scale

soak: $(STAMP)
	SVC_SOAK=1 $(BIN)/pytest -q -m slow

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
