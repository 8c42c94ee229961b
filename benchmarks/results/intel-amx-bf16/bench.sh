#!/bin/bash
# Issue 22's budgets on a 2-core Intel Xeon with AMX and AVX512-BF16 (`dtype: fastest` picks
# bfloat16), from a frozen clone, one benchmark at a time, nothing else on the cores.
#   bash bench.sh CLONE OUT [demo_run] [round_profile] [throughput]
# 7eb5e1c: CLONE=/work/runs/frozen-amx OUT=/work/runs/amx, all three;
# a8b1815: CLONE=/work/runs/frozen-amx2 OUT=/work/runs/amx2, demo_run and round_profile.
# 46be433 (frozen-amx3): benchmarks/trl_grpo.py --config configs/demo.yaml, by hand, alone.
CLONE=$1 OUT=$2
shift 2
cd "$CLONE" || exit 1
export PYTHONPATH=$CLONE RLANYTHING_COMMIT=$(git rev-parse --short HEAD)
export PREFECT_HOME=/tmp/ph-bench PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
PY=/work/main/.venv/bin/python
for bench in "$@"; do
  date -u; echo "== $bench"
  case $bench in
    demo_run) $PY benchmarks/demo_run.py --config configs/demo.yaml --out "$OUT/demo-run.json" > "$OUT/demo-run.log" 2>&1 ;;
    round_profile) $PY benchmarks/round_profile.py --config configs/demo.yaml --out "$OUT/round-profile-demo.json" > "$OUT/round-profile.log" 2>&1 ;;
    throughput) $PY benchmarks/throughput.py --config configs/demo.yaml --tasks 2 --repeats 2 --out "$OUT/throughput-demo.json" > "$OUT/throughput.log" 2>&1 ;;
  esac
  echo rc=$?
done
date -u
