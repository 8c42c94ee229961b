#!/bin/bash
# The rest of the tw-rm probe after its driver (probe.py) was stopped at 06:31 with weak seed 0
# training: the "ablation" RM arm was dropped (the 300-episode RM started at 75.7 % balanced, as
# high as the ablation's 76.7, so the arms would not differ), and a household +Reward run took
# its place (hh-rm.yaml). Two slots, one torch thread each:
#   A: TextWorld weak seed 1, then seed 2;  B: after seed 0, household +Reward seed 0.
set -u
OUT=${1:-/work/runs/tw-rm}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/work/main/.venv/bin/python
export OMP_NUM_THREADS=1
train() { "$PY" -m flows.cli train --config "$OUT/weak-seed$1.yaml" --run-dir "$OUT/weak/seed_$1/run" > "$OUT/weak_$1.log" 2>&1; echo "$(date +%T) weak_$1 ended with $?"; }
( echo "$(date +%T) slot A: weak_1"; train 1; echo "$(date +%T) slot A: weak_2"; train 2 ) &
( while kill -0 "${WAIT_PID:-0}" 2>/dev/null; do sleep 10; done
  echo "$(date +%T) slot B: household +Reward"
  "$PY" -m flows.cli ablate --config "$HERE/hh-rm.yaml" --seeds 1 --rows reward --workers 1 --out "$OUT/hh" > "$OUT/hh.log" 2>&1
  echo "$(date +%T) household ended with $?" ) &
wait
echo "$(date +%T) all done"
