#!/bin/bash
# after `go.sh policy`: its table, and Policy with 5 votes paired with +Reward with 5 votes and v3's Policy
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks
P=benchmarks/results/ablation-textworld-v3/m5
OUT=/work/runs/abl-tw3-m5/out
mkdir -p $P/policy
cp $OUT/ablation.{json,md} $OUT/*.png $P/policy/
.venv/bin/python benchmarks/paired_rows.py --a $OUT/reward --b $OUT/policy --seeds 3 \
  --out $P/paired-m5-reward-vs-m5-policy.json
.venv/bin/python benchmarks/paired_rows.py --a $OUT/policy --b /work/runs/abl-tw3/out/policy --seeds 3 \
  --out $P/paired-m5-policy-vs-v3-policy.json
