#!/bin/bash
s=$1
cd /work/main
sed "s/^seed: 0$/seed: $s/" configs/rloop-tiny.yaml > /work/runs/corr/rloop-$s.yaml
grep -q "^seed: $s$" /work/runs/corr/rloop-$s.yaml || echo "seed line not found" >> /work/runs/corr/rloop-results.txt
rm -rf /work/runs/corr/rloop-run-$s
OMP_NUM_THREADS=1 PREFECT_HOME=/tmp/ph-rl-$s PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/corr/mlflow-rl-$s.db \
  .venv/bin/python -m flows.cli rloop --config /work/runs/corr/rloop-$s.yaml --run-dir /work/runs/corr/rloop-run-$s > /work/runs/corr/rloop-log-$s 2>&1
python3 -c "
import json; d=json.load(open('/work/runs/corr/rloop-run-$s/summary.json')); print('seed $s', [c.get('rloop/expert_set_size') for c in d['cycles']])" >> /work/runs/corr/rloop-results.txt 2>&1
