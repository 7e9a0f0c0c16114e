# scaleout-testbed. Two commands do everything on a fresh machine:
#   sudo make demo    setup, then the default scenario
#   sudo make test    setup, then the whole test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST ?= $(PY) -m pytest
# Emulation runs take a machine-wide lock; tests queue for it rather than fail when others run.
export TESTBED_LOCK_WAIT ?= 900

.PHONY: setup demo test unit integration lint clean help

help:
	@echo "sudo make demo    set up this machine, then run the default scenario"
	@echo "sudo make test    set up this machine, then run the whole test suite"
	@echo "make unit         unit tests only (no root)"
	@echo "make lint         ruff"
	@echo "sudo make clean   remove everything testbed runs left behind (testbed clean)"

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/testbed run long_haul_cnp --quick

test: setup
	$(PYTEST) -q tests/unit tests/integration

unit:
	$(PYTEST) -q tests/unit

integration:
	$(PYTEST) -q tests/integration

lint:
	$(VENV)/bin/ruff check testbed controllers scenarios tests

clean:
	$(VENV)/bin/testbed clean
