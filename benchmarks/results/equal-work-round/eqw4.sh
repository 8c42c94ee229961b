#!/bin/bash
# Equal work, a fourth time, on a 2-core Intel Xeon with AMX (bfloat16): b94463e's code and
# 7eb5e1c's (46be433's tree: the same code), one after the other, alone.
#   git worktree add /work/old-b94 b94463e; git clone -q /work/main /work/runs/frozen-amx3
export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
CFG=/work/main/benchmarks/results/equal-work-round/demo-b94463e-1round.yaml
rm -rf /work/runs/eqw-old /work/runs/eqw-new /tmp/ph-eqw-old /tmp/ph-eqw-new
cd /work/old-b94
PREFECT_HOME=/tmp/ph-eqw-old MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow-eqw-old4.db RLANYTHING_CACHE=/tmp/old-cache PYTHONPATH=/work/old-b94 \
  /usr/bin/time -v /work/main/.venv/bin/python -m flows.cli train --config $CFG --run-dir /work/runs/eqw-old > /work/runs/eqw-old.log 2>&1
echo "rc=$?" > /work/runs/eqw-old.end
cd /work/runs/frozen-amx3
PREFECT_HOME=/tmp/ph-eqw-new MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow-eqw-new4.db PYTHONPATH=/work/runs/frozen-amx3 \
  /usr/bin/time -v /work/main/.venv/bin/python -m flows.cli train --config $CFG --run-dir /work/runs/eqw-new > /work/runs/eqw-new.log 2>&1
echo "rc=$?" > /work/runs/eqw-new.end
