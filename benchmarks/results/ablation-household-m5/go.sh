#!/bin/bash
# probe hh-m5 (README.md): the household ablation's rows (default before,policy,reward) with 5 votes a step.
# One torch thread: it may share the cores with another run.
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-hh-m5 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-hh-m5/mlflow.db \
  OMP_NUM_THREADS=${THREADS:-1}
mkdir -p /work/runs/abl-hh-m5
/usr/bin/time -v .venv/bin/python -m flows.cli ablate --config benchmarks/results/ablation-household-m5/config.yaml \
  --seeds 3 --workers ${WORKERS:-2} --rows "${1:-before,policy,reward}" --out /work/runs/abl-hh-m5/out
echo "exit $?"
