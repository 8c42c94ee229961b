#!/bin/bash
# After throughput.py (9122ca4): round profile and make run's training at HEAD (3420d86), alone.
while kill -0 7632 2>/dev/null; do sleep 5; done
date -u; echo "throughput done"
cd /work/runs/frozen-h
export PYTHONPATH=/work/runs/frozen-h RLANYTHING_COMMIT=$(git rev-parse --short HEAD)
export PREFECT_HOME=/tmp/ph-bench2 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
PY=/work/main/.venv/bin/python
OUT=/work/runs/intel
date -u; echo "== round_profile"
$PY benchmarks/round_profile.py --config configs/demo.yaml --out $OUT/round-profile-demo.json > $OUT/round-profile2.log 2>&1; echo rc=$?
date -u; echo "== demo_run"
$PY benchmarks/demo_run.py --config configs/demo.yaml --out $OUT/demo-run.json > $OUT/demo-run.log 2>&1; echo rc=$?
date -u
