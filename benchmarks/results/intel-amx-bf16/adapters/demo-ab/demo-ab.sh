#!/bin/bash
# A/B of make run's training with (after, fe36037) and without (before, 69117ce) compute_adapters_in,
# one after the other (after first: the host frees up later, which favours the second arm), one torch thread
for arm in after before; do
  ( cd /work/runs/wt-$arm && PREFECT_HOME=/tmp/ph-demo-$arm PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 OMP_NUM_THREADS=1 PYTHONPATH=/work/runs/wt-$arm:/work/runs/wt-$arm/benchmarks \
    /work/main/.venv/bin/python benchmarks/demo_run.py --config configs/demo.yaml \
      --out /work/runs/demo-ab-$arm.json > /work/runs/demo-ab-$arm.log 2>&1 )
  echo "$arm $(date +%T)"
done
echo done
