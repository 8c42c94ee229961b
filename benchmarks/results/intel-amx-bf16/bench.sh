#!/bin/bash
# Issue 22's budgets on a 2-core Intel Xeon with AMX and AVX512-BF16 (`dtype: fastest` picks
# bfloat16), from a frozen clone, one benchmark at a time, nothing else on the cores.
cd /work/runs/frozen-amx
export PYTHONPATH=/work/runs/frozen-amx RLANYTHING_COMMIT=$(git rev-parse --short HEAD)
export PREFECT_HOME=/tmp/ph-bench PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
PY=/work/main/.venv/bin/python
OUT=/work/runs/amx
date -u; echo "== demo_run"
$PY benchmarks/demo_run.py --config configs/demo.yaml --out $OUT/demo-run.json > $OUT/demo-run.log 2>&1; echo rc=$?
date -u; echo "== round_profile"
$PY benchmarks/round_profile.py --config configs/demo.yaml --out $OUT/round-profile-demo.json > $OUT/round-profile.log 2>&1; echo rc=$?
date -u; echo "== throughput"
$PY benchmarks/throughput.py --config configs/demo.yaml --tasks 2 --repeats 2 --out $OUT/throughput-demo.json > $OUT/throughput.log 2>&1; echo rc=$?
date -u
