#!/usr/bin/env bash
# Measures: the next DFlash stage: the shipped drafter warm-started on the three corpora of its last stage plus the
#   branch corpus (tasks-branches.sh), NEXT_MIN CPU-minutes (240) on NEXT_THREADS (2) at the fine-tune lr NEXT_LR
#   (1e-4), with feature dropout 0.2 and weight decay 0.1 against memorizing (held-out CE 3.24 vs 3.32
#   unregularized). NEXT_PARTS adds the drafter's extension parts (e.g. "--draft-head --anchor-context").
#   Run it once tasks-branches.sh has made every shard (a data dir must not grow under a run).
# Takes: NEXT_MIN CPU-minutes plus the featurizing; checkpoints every 5 min, so a re-run continues.
# Results: NEXT_OUT (runs/drafter-next); it ships nothing: compare its final record with
#   graftlib/assets/drafters/smollm2-135m-dflash/training.json, then `graft ship-drafter --from NEXT_OUT/drafter`
#   and `make artifacts`.
source "$(dirname "$0")/lib.sh"
NEXT_MIN=${NEXT_MIN:-240}
NEXT_THREADS=${NEXT_THREADS:-2}
NEXT_OUT=${NEXT_OUT:-runs/drafter-next}
NEXT_PARTS=${NEXT_PARTS:-}
NEXT_LR=${NEXT_LR:-1e-4}
branch_data=runs/drafter-data-tasks-branches
data
featurize_corpora
graft drafter-corpus --corpus data/corpus/smollm2-135m-tasks-branches --to-data "$branch_data" \
  --threads "$NEXT_THREADS" --dtype "$FEATURIZE_DTYPE"
mapfile -t corpora < <(corpora_data)
read -r -a parts <<< "$NEXT_PARTS"
[[ -d "$NEXT_OUT/drafter" ]] || graft train-drafter --data "${corpora[@]}" "$branch_data" --out "$NEXT_OUT" \
  --init-drafter embedded --lr "$NEXT_LR" --minutes "$NEXT_MIN" --clock cpu --threads "$NEXT_THREADS" \
  --blocks-per-seq 16 --feature-dropout 0.2 --weight-decay 0.1 --eval-every 1000 --tau-prompts 8 \
  --checkpoint-minutes 5 "${parts[@]}" $(resume_flag "$NEXT_OUT")
