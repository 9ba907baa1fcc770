#!/usr/bin/env bash
# Measures: hard labels vs distillation (forward KL on the stored top-16, mixed 0.5) at equal CPU time DISTILL_MIN
#   (36) on the same data, both warm-started from the shipped drafter at the fine-tune lr DISTILL_LR (2e-4), side by
#   side on one thread each (--clock cpu: equal compute).
# Takes: DISTILL_MIN CPU-minutes per arm, both at once (about DISTILL_MIN of wall clock on 2 cores).
# Results: runs/drafter-distill/{hard,distill} and runs/drafter-distill/summary.json (baseline "hard"); a finished
#   arm is kept, an interrupted one continues from its checkpoint.
source "$(dirname "$0")/lib.sh"
DISTILL_MIN=${DISTILL_MIN:-36}
DISTILL_LR=${DISTILL_LR:-2e-4}
DISTILL_DATA=${DISTILL_DATA:-runs/drafter-data-v3}
data
run mkdir -p runs/drafter-distill
for arm in "hard --distill 0" "distill --distill 0.5"; do
  train_arm runs/drafter-distill "$arm" --data "$DISTILL_DATA" --init-drafter embedded --minutes "$DISTILL_MIN" \
    --clock cpu --threads 1 --blocks-per-seq 16 --lr "$DISTILL_LR" --eval-every 200 --tau-prompts 8
done
wait
write_ablation runs/drafter-distill runs/drafter-distill/summary.json hard experiments/drafter-distill.sh
