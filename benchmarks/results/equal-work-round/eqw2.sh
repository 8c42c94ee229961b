#!/bin/bash
# Equal work, again: b94463e's code and 0353380's (lean decoding), one after the other, alone.
export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
CFG=/work/main/benchmarks/results/equal-work-round/demo-b94463e-1round.yaml
rm -rf /work/runs/eqw-old /work/runs/eqw-new /tmp/ph-eqw-old /tmp/ph-eqw-new
cd /work/old-b94
PREFECT_HOME=/tmp/ph-eqw-old MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow-eqw-old2.db RLANYTHING_CACHE=/tmp/old-cache PYTHONPATH=/work/old-b94 \
  /usr/bin/time -v /work/main/.venv/bin/python -m flows.cli train --config $CFG --run-dir /work/runs/eqw-old > /work/runs/eqw-old.log 2>&1
echo "rc=$?" > /work/runs/eqw-old.end
cd /work/runs/frozen-lean
PREFECT_HOME=/tmp/ph-eqw-new MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow-eqw-new2.db PYTHONPATH=/work/runs/frozen-lean \
  /usr/bin/time -v /work/main/.venv/bin/python -m flows.cli train --config $CFG --run-dir /work/runs/eqw-new > /work/runs/eqw-new.log 2>&1
echo "rc=$?" > /work/runs/eqw-new.end
