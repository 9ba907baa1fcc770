#!/usr/bin/env bash
# Measures: the embedded EAGLE-3 at the DFlash drafter's training compute, on its data: one EAGLE-3 run of
#   EAGLE3_MIN CPU-minutes (350; --clock cpu, the DFlash lineage's stages add up to ~350) on EAGLE3_THREADS (1), then
#   the shipped DFlash drafter scored on the same held-out anchors (--max-steps 0) for the train_drafter notebook's
#   families table. EAGLE3_INIT=embedded warm-starts from the shipped EAGLE-3 drafter (a stage of its lineage), e.g.
#     EAGLE3_CORPORA=smollm2-135m-tasks:drafter-data-tasks-v3 EAGLE3_INIT=embedded EAGLE3_MIN=120 \
#       EAGLE3_OUT=runs/eagle3-s2 experiments/eagle3-equal.sh
#   Ship with experiments/eagle3-ship.sh (same EAGLE3_OUT).
# Takes: the featurizing of eagle3-data.sh, then ~6 h of wall clock at the default 350 CPU-minutes on one thread;
#   checkpoints every 5 min, so a re-run continues an interrupted one.
# Results: EAGLE3_OUT (runs/eagle3-equal) and EAGLE3_OUT-dflash.
source "$(dirname "$0")/lib.sh"
EAGLE3_INIT=${EAGLE3_INIT:-}
EAGLE3_MIN=${EAGLE3_MIN:-350}
EAGLE3_THREADS=${EAGLE3_THREADS:-1}
EAGLE3_OUT=${EAGLE3_OUT:-runs/eagle3-equal}
data
featurize_corpora
mapfile -t corpora < <(corpora_data)
[[ -d "$EAGLE3_OUT/drafter" ]] || graft train-eagle3 --data "${corpora[@]}" --out "$EAGLE3_OUT" --minutes "$EAGLE3_MIN" \
  --clock cpu --threads "$EAGLE3_THREADS" --eval-every 1000 --eval-blocks-per-seq 16 --checkpoint-minutes 5 \
  ${EAGLE3_INIT:+--init-drafter "$EAGLE3_INIT"} $(resume_flag "$EAGLE3_OUT")
[[ -d "$EAGLE3_OUT-dflash/drafter" ]] || graft train-drafter --data "${corpora[@]}" --out "$EAGLE3_OUT-dflash" \
  --init-drafter embedded --max-steps 0 --blocks-per-seq 16 --tau-prompts 8 --threads "$EAGLE3_THREADS"
