#!/usr/bin/env bash
# Measures: the DFlash drafter's extension parts (graftlib.models.drafter: its own trained head, the anchor-context
#   input path), each added to the shipped drafter at its start and trained PARTS_MIN CPU-minutes (20) at PARTS_LR
#   (3e-4) beside the plain warm start, on the same data and held-out split, two runs at a time on one thread each.
#   On a fresh machine it featurizes PARTS_CORPORA first (the first 8 chat shards, the task and regular corpora).
# Takes: ~1 h 20 min on an AMX CPU (16 min featurizing in bf16); ~2 h 15 min on AVX2 (~70 min in fp32).
# Results: runs/drafter-parts/{base,anchor,head,both} and runs/drafter-parts/summary.json (baseline "base").
source "$(dirname "$0")/lib.sh"
PARTS_MIN=${PARTS_MIN:-20}
PARTS_LR=${PARTS_LR:-3e-4}
EAGLE3_CORPORA=${PARTS_CORPORA:-smollm2-135m:drafter-data-v3:8 smollm2-135m-tasks:drafter-data-tasks-v3 smollm2-135m-regular:drafter-data-regular}
data
featurize_corpora
mapfile -t corpora < <(corpora_data)
run mkdir -p runs/drafter-parts
for pair in "base|anchor --anchor-context" "head --draft-head|both --draft-head --anchor-context"; do
  for arm in "${pair%%|*}" "${pair##*|}"; do
    train_arm runs/drafter-parts "$arm" --data "${corpora[@]}" --init-drafter embedded --minutes "$PARTS_MIN" \
      --clock cpu --threads 1 --blocks-per-seq 16 --lr "$PARTS_LR" --eval-every 100000 --tau-prompts 8 \
      --checkpoint-minutes 5
  done
  wait
done
write_ablation runs/drafter-parts runs/drafter-parts/summary.json base experiments/drafter-parts.sh
