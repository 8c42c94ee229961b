#!/bin/bash
# usage: search.sh SEED
s=$1
cd /work/main
sed "s/^seed: 0$/seed: $s/" examples/corridor/config.yaml > /work/runs/corr/config-$s.yaml
sed -i "s|name: examples/corridor/corridor.py:CorridorEnvironment|name: /work/main/examples/corridor/corridor.py:CorridorEnvironment|" /work/runs/corr/config-$s.yaml
rm -rf /work/runs/corr/run-$s
OMP_NUM_THREADS=1 PREFECT_HOME=/tmp/ph-corr-$s PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 MLFLOW_TRACKING_URI=sqlite:////work/runs/corr/mlflow-$s.db \
  .venv/bin/rlanything train --config /work/runs/corr/config-$s.yaml --run-dir /work/runs/corr/run-$s > /work/runs/corr/log-$s 2>&1
.venv/bin/python - <<PY >> /work/runs/corr/results.txt
import pandas as pd
from pathlib import Path
r = Path("/work/runs/corr/run-$s")
out = []
for k in (0, 1):
    p = r / f"round_{k:03d}" / "acceptance.parquet"
    if p.is_file():
        d = pd.read_parquet(p); a = d[d["accepted"]]
        out.append((k, len(d), list(a["direction"]), list(a["acc_candidate"])))
    else:
        out.append((k, None))
print("seed $s", out)
PY
