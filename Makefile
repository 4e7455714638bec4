# BugHunt Recovery Lab. POSIX only (Linux, macOS): the lab is about SIGKILL, fsync and rename.
#   make lab    set up .venv from requirements.txt, open JupyterLab on the start notebook
#   make app    the lessons' panels as one app, code hidden (Voila)
#   make book   the workbook as a static site, from the stored notebooks, offline (build/book/html)
#   make test   set up .venv (the book's tools too), then every test (pytest, the book, and the
#               notebooks under strict nbval), then every lesson's claims (python -m bughunt claims)
#   make test-fast  the tier for a change: unit, stores, conformance, small-site lessons, static
#               notebook checks (pytest -m "not slow"); LESSON=N adds that lesson's claims
#   make regen  re-execute the notebooks from notebooks/src/ (NB=02 for one)
#   make bench  what the lab costs, as ratios measured in one run (bench-results/bench.csv)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BOOK_STAMP := $(VENV)/.installed-book

.PHONY: setup setup-book test test-fast lab app book lesson regen bench clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11 or newer is needed, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

# The book's tools (Sphinx, myst-nb, sphinx-book-theme) are kept out of requirements.txt, so
# `make lab` installs only what the lessons need.
$(BOOK_STAMP): requirements-book.txt $(STAMP)
	$(PY) -m pip install --quiet -r requirements-book.txt
	touch $(BOOK_STAMP)

setup-book: $(BOOK_STAMP)

# The tiers are in tests/tiers.py (its doc says what each runs); each prints where its time went
# and the 15 slowest tests (CI's record). PYTHONHASHSEED=0 reaches the notebook kernels, so nothing
# printed depends on hash order. `make test` ends with every sentence in which a lesson states what
# its run found, checked on this run's results (the notebooks' kernels keep them for the run).
test: setup setup-book
	$(PY) tests/tiers.py full

test-fast: setup
	$(PY) tests/tiers.py fast $(if $(LESSON),--lesson $(LESSON))

# Re-execute the notebooks from notebooks/src/*.py and normalize their stored outputs.
regen: setup
	$(PY) -m bughunt.lab.regen $(NB)

# Root (a container, a CI image, a cloud VM) must pass --allow-root to Jupyter. LAB_ARGS adds
# more (the tests: --no-browser --ServerApp.port=0).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)
# JupyterLab is rooted at the repository, so the README's paths (notebooks/..., bughunt/...) are
# the file browser's paths, and opens on the start notebook: the browser it starts and the URL
# it prints both go there (LabApp.default_url), not to the Launcher. notebook_shim, the classic
# Notebook's config bridge that JupyterLab 4 does not use, is off: its scan of the server's
# settings reads the deprecated ServerApp.token and puts a DeprecationWarning in the log.
# The lab's stylesheet (bughunt/lab/static/custom.css: listings keep their lines and scroll
# sideways, never cut inside a word) is JupyterLab's custom CSS, served by bughunt.lab.labstyle.
START  := notebooks/00_start_here.ipynb
LAB_OPTS := --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/$(START) \
            --ServerApp.jpserver_extensions=notebook_shim=False \
            --ServerApp.jpserver_extensions=bughunt.lab.labstyle=True --LabApp.custom_css=True

lab: setup
	$(VENV)/bin/jupyter lab $(ROOT_ARGS) $(LAB_OPTS) $(LAB_ARGS)

# Speed and cost, as ratios measured in one run; writes bench-results/bench.csv.
bench: setup setup-book
	$(PY) -m bughunt.bench --csv bench-results/bench.csv

# The panels of every lesson as one app, code hidden (Voila); it prints the address to open.
# Offline and with a clean console: the app's template (notebooks/app/jupyter, found through
# JUPYTER_PATH) links nothing from a CDN, and the jupytext JupyterLab extension, which needs
# JupyterLab's notebook editor and fails to load in Voila, is left out. APP_ARGS adds more (the
# tests: --no-browser --port=N).
APP_OPTS := --Voila.ip=127.0.0.1 --template=bughunt \
            --VoilaConfiguration.extension_denylist=jupyterlab-jupytext

app: setup
	JUPYTER_PATH="$(CURDIR)/notebooks/app/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH}" \
	    $(VENV)/bin/voila notebooks/app/bughunt_app.ipynb $(APP_OPTS) $(APP_ARGS)

# The static book, built from the stored notebooks (never re-executed) without the network.
# BOOK_ARGS: --repository OWNER/NAME --branch B for the Binder links (default: git's origin).
book: setup-book
	$(PY) -m bughunt.book --out build/book $(BOOK_ARGS)

lesson: setup
	$(PY) -m bughunt lesson

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info build
