#!/bin/bash
# make run's training alone, two threads, without (69117ce) then with (d472a67) compute_adapters_in
for arm in before after; do
  ( cd /work/runs/wt-$arm && PREFECT_HOME=/tmp/ph-demo2-$arm PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 PYTHONPATH=/work/runs/wt-$arm:/work/runs/wt-$arm/benchmarks \
    /work/main/.venv/bin/python benchmarks/demo_run.py --config configs/demo.yaml \
      --out /work/runs/demo-ab2-$arm.json > /work/runs/demo-ab2-$arm.log 2>&1 )
  echo "$arm $(date +%T)"
done
echo done
