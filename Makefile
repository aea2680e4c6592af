# The two set-up commands of the README: `make train` and `make test`. Each creates .venv on
# first use (the local CPU torch wheel first, so nothing pulls a multi-GB CUDA build).
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
SEEDS   ?= 0 1 2
STAMP   := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24"
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,envpool]"
	touch $(STAMP)

$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install -q -e ".[dev,envpool,bench]"
	touch $@

.PHONY: setup train test lint bench
setup: $(STAMP)

train: $(STAMP)
	$(PY) -m flows.train --env CartPole-v1 --scheduler fixed:8 --seeds $(SEEDS)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The quick benchmarks in sequence (benchmarks/run_all.py; its docstring lists them and the
# slow ones left out, with their commands).
bench: $(VENV)/.bench
	$(PY) -m benchmarks.run_all
