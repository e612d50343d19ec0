# npkl-dist: two commands on a fresh machine.
#   make demo   creates .venv, installs the project, runs the main job on digits
#   make test   creates/updates .venv with the pinned test group, runs the default suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# re-install whenever pyproject.toml changes
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint test-heavy test-all bench bench-pipeline install system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"

$(STAMP): pyproject.toml | $(PY)
	rm -f $(VENV)/.installed-*
	$(PY) -m pip install --quiet -e . --group test
	touch $@

install: $(STAMP)

# The Debian package the default suite reads: liblinear-tools ships heart_scale, which
# tests/benchmarks/test_paper_protocols.py checks against svm-scale. bench/paper/datasets.py's installer
# runs apt-get when root and the file is missing; otherwise it prints the command and that one
# test skips.
system-deps: $(STAMP)
	@$(PY) -c "from bench.paper import datasets; \
	datasets.ensure_installed(only={'liblinear-tools'}, pip=False)"

demo: $(STAMP)
	$(VENV)/bin/npkl demo --out demo_out

# The default suite runs on TEST_WORKERS processes (pytest-xdist), each test file whole on one
# process; numba compiles on both cores at once. On a 2-core Zen 3 with numba's cache empty it
# took 771 s this way against 1340 s on one process (bench/RESULTS.md, "Test suite").
# `make test TEST_WORKERS=0` runs it on one process.
TEST_WORKERS ?= 2

# metric-learn's ITML (a peer of bench/paper) in its own environment: metric-learn 0.7.0
# needs an older scikit-learn (bench/paper/peers.py); tests/benchmarks/test_paper_peers.py runs it.
ITML_STAMP := bench/.venv-itml/.installed

$(ITML_STAMP): | $(STAMP)
	@echo "creating bench/.venv-itml (metric-learn's ITML for the paper harness' peers)"
	$(PY) -c "from bench.paper import peers; peers.ensure_itml_env()"

# lint (ruff, configured in pyproject.toml) and the layering contracts (import-linter) first:
# both take seconds and name the line that broke them
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/ruff format --check
	$(VENV)/bin/lint-imports

test: $(STAMP) system-deps $(ITML_STAMP) lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-heavy: $(STAMP)
	$(PY) -m pytest -m heavy

test-all: $(STAMP) system-deps $(ITML_STAMP)
	$(PY) -m pytest -m "heavy or not heavy"

# benchmarks write stamped JSON under bench/results/ (bench/README.md); docs/performance.md
# is regenerated from it
bench: $(STAMP)
	$(PY) bench/bench_sweep.py --n 100000 1000000 --rank 16 64 128 --dtype float32 float64
	$(PY) -m bench.performance

# the whole pipeline on 1e6 synthetic points
bench-pipeline: $(STAMP)
	$(PY) bench/bench_pipeline.py --n 1000000 --d 16 --knn 10 --rank 32 --constrained 0.01
	$(PY) -m bench.performance

clean:
	rm -rf $(VENV) bench/.venv-itml demo_out build *.egg-info .pytest_cache .hypothesis
