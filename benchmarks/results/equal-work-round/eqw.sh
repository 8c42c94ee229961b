#!/bin/bash
# Equal work: the demo config of b94463e (issue 22's era), one round, with b94463e's code and with HEAD's.
while [ ! -f /work/runs/fresh-run.end ]; do sleep 10; done
export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
rm -rf /work/runs/eqw-old /work/runs/eqw-new
cd /work/old-b94
date -u +%FT%TZ > /work/runs/eqw-old.start
PREFECT_HOME=/tmp/ph-eqw-old MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow-eqw-old.db RLANYTHING_CACHE=/tmp/old-cache PYTHONPATH=/work/old-b94 \
  /usr/bin/time -v /work/main/.venv/bin/python -m flows.cli train --config /work/runs/old-demo.yaml --run-dir /work/runs/eqw-old > /work/runs/eqw-old.log 2>&1
echo "rc=$?" > /work/runs/eqw-old.end
cd /work/main
PREFECT_HOME=/tmp/ph-eqw-new MLFLOW_TRACKING_URI=sqlite:////work/runs/mlflow-eqw-new.db \
  /usr/bin/time -v /work/main/.venv/bin/python -m flows.cli train --config /work/runs/old-demo.yaml --run-dir /work/runs/eqw-new > /work/runs/eqw-new.log 2>&1
echo "rc=$?" > /work/runs/eqw-new.end
