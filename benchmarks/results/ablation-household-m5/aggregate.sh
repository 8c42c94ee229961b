#!/bin/bash
# probe hh-m5 (README.md): after `go.sh before,policy,reward` (and `go.sh reward-env`), the table of
# the rows run (nothing left to train), each RM-trained run's signal, and the paired tests of the
# paper's order. ROWS: the rows to tabulate (default before,policy,reward,reward-env).
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks PREFECT_HOME=/tmp/ph-hh-m5 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/abl-hh-m5/mlflow.db
P=benchmarks/results/ablation-household-m5
OUT=/work/runs/abl-hh-m5/out
ROWS=${ROWS:-before,policy,reward,reward-env}
.venv/bin/python -m flows.cli ablate --config $P/config.yaml --seeds 3 --workers 2 --rows $ROWS --out $OUT || exit 1
cp $OUT/ablation.{json,md} $OUT/*.png $P/
.venv/bin/python benchmarks/paired_rows.py --a $OUT/reward --b $OUT/policy --seeds 3 --out $P/paired-reward-vs-policy.json
if [ -d $OUT/reward-env/seed_2/eval ]; then
  .venv/bin/python benchmarks/paired_rows.py --a $OUT/reward-env --b $OUT/reward --seeds 3 --out $P/paired-reward-env-vs-reward.json
fi
for row in reward reward-env; do
  for s in 0 1 2; do
    [ -d $OUT/$row/seed_$s/run ] && .venv/bin/python benchmarks/rm_signal.py --run-dir $OUT/$row/seed_$s/run --out $P/rm-signal-$row-seed$s.json
  done
done
