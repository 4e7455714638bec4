# BugHunt Recovery Lab. POSIX only (Linux, macOS): the lab is about SIGKILL, fsync and rename.
#   make lab    set up .venv from requirements.txt, open JupyterLab on the start notebook
#   make test   set up .venv, then every test (pytest; notebooks under nbval once they exist)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(wildcard notebooks/*.ipynb)

.PHONY: setup test lab lesson clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11 or newer is needed, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(PY) -m pytest tests $(if $(NOTEBOOKS),--nbval $(NOTEBOOKS))

lab: setup
	$(VENV)/bin/jupyter lab $(firstword $(wildcard notebooks/00_start_here.ipynb) notebooks)

lesson: setup
	$(PY) -m bughunt lesson

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
