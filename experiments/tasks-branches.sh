#!/usr/bin/env bash
# Measures: nothing; makes more greedy text of the task distribution: each `tdes` prompt answered three times, a
#   sampled prefix kept as context, then the target's greedy continuation (graftlib/training/drafter/data/target_data.py). On a
#   fresh machine the committed shards are featurized from their corpus first (~3.6x cheaper than generating them
#   again); then BRANCH_MIN minutes (60) of generation on BRANCH_THREADS (1), and the finished shards' tokens
#   exported into the committed corpus. Re-run to go on.
# Takes: BRANCH_MIN minutes plus the featurizing (a shard is ~50k response tokens).
# Results: runs/drafter-data-tasks-branches and data/corpus/smollm2-135m-tasks-branches.
source "$(dirname "$0")/lib.sh"
BRANCH_MIN=${BRANCH_MIN:-60}
BRANCH_THREADS=${BRANCH_THREADS:-1}
branch_data=runs/drafter-data-tasks-branches
branch_corpus=data/corpus/smollm2-135m-tasks-branches
data
graft drafter-corpus --corpus "$branch_corpus" --to-data "$branch_data" --threads "$BRANCH_THREADS"
graft drafter-data --pool tdes --out "$branch_data" --n-prompts 2702 --branches 3 --branch-tokens 32 \
  --sample-temperature 1.0 --shard-size 192 --batch-size 96 --dtype float32 --threads "$BRANCH_THREADS" \
  --max-minutes "$BRANCH_MIN"
graft drafter-corpus --corpus "$branch_corpus" --from-data "$branch_data"
