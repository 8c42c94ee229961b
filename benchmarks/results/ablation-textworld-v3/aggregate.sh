#!/bin/bash
# the table of the rows trained so far (nothing left to train): Before, Policy, +Reward
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-abl3 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-tw3/mlflow.db
.venv/bin/python -m flows.cli ablate --config configs/ablation-textworld.yaml --seeds 3 --workers 2 \
  --rows before,policy,reward --out /work/runs/abl-tw3/out
R=benchmarks/results/ablation-textworld-v3
cp /work/runs/abl-tw3/out/ablation.{json,md} /work/runs/abl-tw3/out/*.png $R/
for s in 0 1 2; do
  .venv/bin/python benchmarks/rm_signal.py --run-dir /work/runs/abl-tw3/out/reward/seed_$s/run --out $R/rm-signal-reward-seed$s.json
done
/work/runs/abl-tw3/collect.sh
