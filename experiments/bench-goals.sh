#!/usr/bin/env bash
# Measures: GRAFT vs AR, the chain and DDTree at its best fixed budgets (4, 8) on six tasks x GOALS_N prompts
#   (GOALS_N=10) x 256 tokens, gsm8k first.
# Takes: about 90 min on a 2-core CPU.
# Results: results/graft-goals.jsonl (resumable: an interrupted run goes on with the next prompt).
source "$(dirname "$0")/lib.sh"
GOALS_N=${GOALS_N:-10}
data
for t in gsm8k mbpp alpaca math500 humaneval mt-bench; do
  graft bench --max-new-tokens 256 --methods ar dflash@3 ddtree@4 ddtree@8 graft@64 --task "$t" --n-prompts "$GOALS_N" \
    --out results/graft-goals.jsonl
done
