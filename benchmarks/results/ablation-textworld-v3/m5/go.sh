#!/bin/bash
# probe tw3-m5 (README.md): rows (default before,reward) with 5 votes a step, on v3's warm starts
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-m5 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-tw3-m5/mlflow.db
/usr/bin/time -v .venv/bin/python -m flows.cli ablate --config benchmarks/results/ablation-textworld-v3/m5/config.yaml \
  --seeds 3 --workers 2 --rows "${1:-before,reward}" --out /work/runs/abl-tw3-m5/out
echo "exit $?"
