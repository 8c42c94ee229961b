#!/bin/bash
# after `go.sh reward-env,step-only,anchor-state`: the seven-row table with 5 votes (nothing left
# to train), its RM signals, and the paired tests the paper's ordering needs
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-m5 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-tw3-m5/mlflow.db
P=benchmarks/results/ablation-textworld-v3/m5/all
OUT=/work/runs/abl-tw3-m5/out
.venv/bin/python -m flows.cli ablate --config benchmarks/results/ablation-textworld-v3/m5/config.yaml \
  --seeds 3 --workers 2 --out $OUT || exit 1
mkdir -p $P
cp $OUT/ablation.{json,md} $OUT/*.png $P/
for row in reward-env step-only anchor-state; do
  for s in 0 1 2; do
    .venv/bin/python benchmarks/rm_signal.py --run-dir $OUT/$row/seed_$s/run --out $P/rm-signal-$row-seed$s.json
  done
done
