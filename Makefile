# make train / make test create the Python 3.12 virtual environment (.venv) first when it is missing.
PY := .venv/bin/python
SIM ?= robosuite_lift

.PHONY: setup train test test-all bench

setup:
	@bash scripts/setup.sh

train: setup
	$(PY) -m vla_wmrl.train sim=$(SIM)

test: setup
	$(PY) -m pytest

test-all: setup
	$(PY) -m pytest -m ""

bench: setup
	$(PY) benchmarks/sim_throughput.py
