# BugHunt Recovery Lab. POSIX only (Linux, macOS): the lab is about SIGKILL, fsync and rename.
#   make lab    set up .venv from requirements.txt, open JupyterLab on the start notebook
#   make app    the lessons' panels as one app, code hidden (Voila)
#   make test   set up .venv, then every test (pytest, and the notebooks under strict nbval)
#   make regen  re-execute the notebooks from notebooks/src/ (NB=02 for one)
#   make bench  what the lab costs, as ratios measured in one run (bench-results/bench.csv)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(wildcard notebooks/*.ipynb)

NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg \
          --nbval-cell-timeout=300 --nbval-kernel-startup-timeout=120

.PHONY: setup test lab app lesson regen bench clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11 or newer is needed, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

# PYTHONHASHSEED reaches the notebook kernels, so nothing printed depends on hash order.
# --durations=15: the 15 slowest tests, printed at the end (CI's record of where the time goes).
test: setup
	PYTHONHASHSEED=0 $(PY) -m pytest --durations=15 tests $(if $(NOTEBOOKS),$(NBVAL) $(NOTEBOOKS))

# Re-execute the notebooks from notebooks/src/*.py and normalize their stored outputs.
regen: setup
	$(PY) -m bughunt.lab.regen $(NB)

# Root (a container, a CI image, a cloud VM) must pass --allow-root to Jupyter. LAB_ARGS adds
# more (the tests: --no-browser --ServerApp.port=0).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup
	$(VENV)/bin/jupyter lab $(ROOT_ARGS) $(LAB_ARGS) $(firstword $(wildcard notebooks/00_start_here.ipynb) notebooks)

# Speed and cost, as ratios measured in one run; writes bench-results/bench.csv.
bench: setup
	$(PY) -m bughunt.bench --csv bench-results/bench.csv

# The panels of every lesson as one app, code hidden (Voila); it prints the address to open.
app: setup
	$(VENV)/bin/voila notebooks/app/bughunt_app.ipynb --Voila.ip=127.0.0.1

lesson: setup
	$(PY) -m bughunt lesson

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
