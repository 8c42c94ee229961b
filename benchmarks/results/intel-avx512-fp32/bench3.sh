#!/bin/bash
# TRL GRPOTrainer against our outcome-only round on the demo's SmolLM2, from a fresh clone of
# 471ca1f (trl_grpo.py unchanged since it measured 0.177 on the AMD host), alone.
cd /tmp/fresh-check
export PYTHONPATH=/tmp/fresh-check RLANYTHING_COMMIT=$(git rev-parse --short HEAD)
export PREFECT_HOME=/tmp/ph-bench3 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
PY=/work/main/.venv/bin/python
OUT=/work/runs/intel
date -u; echo "== trl_grpo"
$PY benchmarks/trl_grpo.py --config configs/demo.yaml --out $OUT/trl-grpo-demo.json > $OUT/trl-grpo.log 2>&1; echo rc=$?
date -u
