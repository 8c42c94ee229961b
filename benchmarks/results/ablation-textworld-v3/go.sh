#!/bin/bash
# TextWorld ablation v3 (issue 20): RM warm start on 150 episodes + balance_directions.
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-abl3 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-tw3/mlflow.db
/usr/bin/time -v .venv/bin/python -m flows.cli ablate --config configs/ablation-textworld.yaml --seeds 3 \
  --workers 2 --rows "$1" --out /work/runs/abl-tw3/out
echo "exit $?" 
