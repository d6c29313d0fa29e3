# One-command setup and run. Every target sets up the virtualenv first if needed.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-install only when the inputs of the install change. STACK=tfx-1.16|tfx-1.21 and PYTHON=... choose by
# hand; by default scripts/setup_venv.sh chooses from the system (README "Setup").
STAMP := $(VENV)/.installed-$(shell cat setup.py constraints/*.txt scripts/setup_venv.sh 2>/dev/null | sha256sum | cut -c1-16)
OUTPUT ?= output
MODEL ?= cnn
ARGS ?=
PYTEST_ARGS ?=
# `make test` runs test files on this many processes (pytest-xdist; 0 runs them in this one). A test spends
# much of its time in one Python thread (imports, tracing, a subprocess starting), so two keep two cores
# busy; each file stays on one process, so its module fixtures (a pipeline run many tests read) run once.
PYTEST_WORKERS ?= 2

IMAGE ?= tfx-project:latest

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run test test-all lint clean help image push-image report notebook tensorboard tour chromium bench bench-quick beam-pool notebook-classic docs docs-serve

help:
	@echo "make setup  - create .venv on the stack this system runs (TFX 1.21 on glibc >= 2.39, else TFX 1.16; STACK=, PYTHON=)"
	@echo "make run    - set up if needed, run the pipeline (MODEL=$(MODEL), OUTPUT=$(OUTPUT), ARGS=...)"
	@echo "make test   - set up if needed, lint, run the test suite on $(PYTEST_WORKERS) processes (PYTEST_WORKERS=, PYTEST_ARGS=...)"
	@echo "make lint   - ruff, the layer contract (lint-imports) and mypy; rules in pyproject.toml"
	@echo "make bench  - run the benchmarks (ratios side by side; bench-quick for a smoke run)"
	@echo "make report - write output/report.html (+ .json) for the last run"
	@echo "make beam-pool - a Beam SDK worker pool with this project's Python (POOL_PORT=50000)"
	@echo "make notebook - open the metrics notebook on the last run (JupyterLab)"
	@echo "make notebook-classic - the same notebook in nbclassic, with TFMA's own views (need internet)"
	@echo "make tensorboard - serve the last run's training logs (and --profile trace) in TensorBoard"
	@echo "make docs   - build the documentation site into site/, strictly (broken links fail)"
	@echo "make docs-serve - serve the documentation site on http://127.0.0.1:8000/ (DOCS_ADDR=...)"
	@echo "make image  - build the Kubeflow pipeline image (IMAGE=...; needs Docker)"
	@echo "make clean  - remove the run output (not the virtualenv)"

setup: $(STAMP)

$(STAMP):
	@bash scripts/setup_venv.sh "$(VENV)"
	@touch "$@"

run: setup
	$(PY) -m pipeline run --model $(MODEL) --output $(OUTPUT) $(ARGS)

# Lint first: a lint failure fails `make test` (and CI) before the slow tests start.
test: setup chromium lint
	$(PY) -m pytest --numprocesses $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# ruff (style), import-linter (the layer contract in pyproject.toml, docs/ARCHITECTURE.md), mypy (types).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Heavy cases (bigger data, longer training) live behind the `slow` marker.
test-all: setup chromium lint
	$(PY) -m pytest -m "slow or not slow" $(PYTEST_ARGS)

# Benchmarks: ratios measured side by side in one run (benchmarks/README.md). ~25-30 min.
bench: setup
	$(PY) benchmarks/run_all.py $(ARGS)

bench-quick: setup
	$(PY) benchmarks/run_all.py --quick $(ARGS)

report: setup
	$(PY) -m pipeline report --output $(OUTPUT) $(ARGS)

# A Beam SDK worker pool with this project's interpreter (README "Scaling out").
POOL_PORT ?= 50000
beam-pool: setup
	$(PY) -m pipeline beam-pool --port $(POOL_PORT)

# Jupyter on the metrics notebook, pointed at the last run in $(OUTPUT).
# As root (usual in containers) Jupyter refuses to start without --allow-root; ARGS: more options, e.g.
# ARGS="--port 8890 --no-browser".
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
notebook: setup
	METRICS_OUTPUT_DIR="$(abspath $(OUTPUT))" $(VENV)/bin/jupyter lab $(ALLOW_ROOT) notebooks/inspect_metrics.ipynb $(ARGS)

# The same notebook in nbclassic, where TFMA's own views draw (README "Reading the metrics"): TFMA's
# nbextension (and tfma_preload, which loads TFMA's bundle without a require.js race) enabled through
# notebooks/classic/ (no install step, no network), the widgets front end TFMA needs pinned in
# constraints/<stack>.txt, METRICS_FRONT_END=classic picks TFMA's views in the notebook.
# NOTEBOOKS: the folder served (the browser test serves a scratch copy); ARGS: more nbclassic options.
NOTEBOOKS ?= notebooks
notebook-classic: setup
	JUPYTER_CONFIG_PATH="$(abspath notebooks/classic)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	METRICS_FRONT_END=classic METRICS_OUTPUT_DIR="$(abspath $(OUTPUT))" \
	$(VENV)/bin/jupyter nbclassic --ServerApp.root_dir="$(abspath $(NOTEBOOKS))" \
	  --NotebookApp.extra_nbextensions_path="$(abspath notebooks/classic/nbextensions)" \
	  --NotebookApp.default_url=/nbclassic/notebooks/inspect_metrics.ipynb --NotebookApp.show_banner=False \
	  $(ALLOW_ROOT) $(ARGS)

# TensorBoard on the newest Trainer's logs in $(OUTPUT) (found through MLMD); ARGS="--port 6007".
tensorboard: setup
	$(PY) -m pipeline tensorboard --output $(OUTPUT) $(ARGS)

# The README's screenshot tour (docs/tour/) from the screenshots the browser tests took.
tour: setup
	$(PY) scripts/update_tour.py

# The documentation site (mkdocs.yml, pages in docs/): warnings, broken links and anchors are errors.
# docs/cli.md and docs/settings.md are generated (scripts/write_cli_reference.py, write_settings_table.py).
DOCS_ADDR ?= 127.0.0.1:8000
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict $(ARGS)

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict --dev-addr $(DOCS_ADDR) $(ARGS)

# The report test opens the HTML report in a real headless Chromium (Debian's package).
chromium:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

# Kubeflow pipeline image (needs a Docker engine; see kubeflow/README.md). IMAGE_STACK: the stack it
# carries (tfx-1.16 or tfx-1.21), whatever this machine's own .venv is.
IMAGE_STACK ?= tfx-1.16
image:
	docker build -f kubeflow/Dockerfile --build-arg STACK=$(IMAGE_STACK) -t $(IMAGE) .

push-image: image
	docker push $(IMAGE)

clean:
	rm -rf "$(OUTPUT)"
