#!/bin/bash
# Issue 22's budgets on the Intel Xeon without AVX512-BF16 (float32 models), from a frozen clone.
cd /work/runs/frozen-s
export PYTHONPATH=/work/runs/frozen-s RLANYTHING_COMMIT=$(git rev-parse --short HEAD)
export PREFECT_HOME=/tmp/ph-bench PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
PY=/work/main/.venv/bin/python
OUT=/work/runs/intel
date -u; echo "== round_profile"
$PY benchmarks/round_profile.py --config configs/demo.yaml --out $OUT/round-profile-demo.json > $OUT/round-profile.log 2>&1; echo rc=$?
date -u; echo "== throughput"
$PY benchmarks/throughput.py --config configs/demo.yaml --tasks 2 --repeats 2 --out $OUT/throughput-demo.json > $OUT/throughput.log 2>&1; echo rc=$?
date -u; echo "== demo_run"
$PY benchmarks/demo_run.py --config configs/demo.yaml --out $OUT/demo-run.json > $OUT/demo-run.log 2>&1; echo rc=$?
date -u
