#!/bin/bash
# The GPU checks, run on a lent CUDA machine that has PyTorch but not this project's other
# packages and no network: the wheels of Prefect, MLflow (skinny) and their dependencies for
# Python 3.12 travel in .whl/ (benchmarks/results/gpu/README.md says how they were fetched).
# Writes the CUDA tests' log and JUnit XML, the GPU throughput benchmark's JSON and the
# versions to $OUT.
# With BASE_MODELLING=FILE the throughput benchmark also runs on a copy of the tree whose
# rlanything_core/models/modelling.py is FILE (an older version): before and after on one machine.
# TESTS=EXPR passes `-k EXPR` to pytest.
set -o pipefail
export PYTHONUNBUFFERED=1 PREFECT_SERVER_ANALYTICS_ENABLED=false \
  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 PREFECT_HOME=/tmp/prefect-home
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 - <<'PY' | tee "$OUT/versions.txt"
import importlib, platform
print("python", platform.python_version())
for name in ("torch", "transformers", "peft", "prefect", "mlflow", "pandas", "pyarrow", "pydantic"):
    print(name, importlib.import_module(name).__version__)
PY
timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -m gpu -v -s -p no:cacheprovider \
  ${TESTS:+-k "$TESTS"} tests/gpu/test_cuda.py --junitxml="$OUT/test-cuda.xml" 2>&1 | tee "$OUT/test-cuda.log" | grep -v "Loading weights"
sed 's/device: cpu/device: cuda/' configs/tiny.yaml > /tmp/tiny-cuda.yaml
timeout "${BENCH_TIMEOUT:-150}" python3 benchmarks/throughput.py --config /tmp/tiny-cuda.yaml \
  --out "$OUT/throughput-tiny-cuda.json" 2>&1 | grep -v "Loading weights" | tail -15
if [ -n "$BASE_MODELLING" ]; then
  rm -rf /tmp/base && mkdir /tmp/base && cp -r benchmarks configs rlanything_core /tmp/base/
  cp "$BASE_MODELLING" /tmp/base/rlanything_core/models/modelling.py
  (cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base RLANYTHING_COMMIT="${BASE_COMMIT:-base}" \
    timeout "${BENCH_TIMEOUT:-150}" python3 benchmarks/throughput.py --config /tmp/tiny-cuda.yaml \
    --out "$OUT/throughput-tiny-cuda-base.json" 2>&1 | grep -v "Loading weights" | tail -15)
fi
