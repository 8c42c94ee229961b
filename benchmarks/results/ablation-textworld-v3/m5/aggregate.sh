#!/bin/bash
# after go.sh (whose ablate wrote the table): copy it, the RM signals, and +Reward paired with v3's rows
cd /work/main
export PYTHONPATH=/work/main:/work/main/benchmarks
P=benchmarks/results/ablation-textworld-v3/m5
OUT=/work/runs/abl-tw3-m5/out
cp $OUT/ablation.{json,md} $OUT/*.png $P/
for s in 0 1 2; do
  .venv/bin/python benchmarks/rm_signal.py --run-dir $OUT/reward/seed_$s/run --out $P/rm-signal-reward-m5-seed$s.json
done
for b in reward policy; do
  .venv/bin/python benchmarks/paired_rows.py --a $OUT/reward --b /work/runs/abl-tw3/out/$b --seeds 3 \
    --out $P/paired-m5-reward-vs-v3-$b.json
done
