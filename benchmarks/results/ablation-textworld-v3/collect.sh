#!/bin/bash
# copy each finished run's held-out evaluations (eval.json) into the repo's partial/ record
cd /work/runs/abl-tw3/out
for d in */seed_*/run/eval/step_*; do
  row=${d%%/*}; rest=${d#*/}; seed=${rest%%/*}; step=${d##*/}
  [ "$step" = step_000 ] && continue  # Before's evaluation, shared (before-eval.json)
  [ -f $d/eval.json ] && cp $d/eval.json /work/main/benchmarks/results/ablation-textworld-v3/partial/$row-$seed-$step.json
done
