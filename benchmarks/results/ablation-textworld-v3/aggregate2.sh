#!/bin/bash
# the table after the second run: every row whose three seeds finished (argument: the rows); its own
# PREFECT_HOME, so it can run beside go.sh still training Anchor-state
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-agg PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-tw3/mlflow.db
.venv/bin/python -m flows.cli ablate --config configs/ablation-textworld.yaml --seeds 3 --workers 2 \
  --rows "$1" --out /work/runs/abl-tw3/out
R=benchmarks/results/ablation-textworld-v3
cp /work/runs/abl-tw3/out/ablation.{json,md} /work/runs/abl-tw3/out/*.png $R/
for row in reward-env step-only anchor-state; do
  for s in 0 1 2; do
    d=/work/runs/abl-tw3/out/$row/seed_$s/run
    [ -f $d/summary.json ] && .venv/bin/python benchmarks/rm_signal.py --run-dir $d --out $R/rm-signal-$row-seed$s.json
  done
done
bash $R/collect.sh
