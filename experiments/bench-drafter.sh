#!/usr/bin/env bash
# Measures: the shipped drafter's chain and DDTree acceptance and CPU speedups (chain 3-15, DDTree 4-64; gsm8k x 4
#   prompts, five more tasks x 2) x 256 tokens.
# Takes: about 40 min on a 2-core CPU.
# Results: results/drafter-gsm8k.jsonl, results/drafter-tasks.jsonl (resumable: records are keyed by their settings).
source "$(dirname "$0")/lib.sh"
data
graft bench --max-new-tokens 256 --methods ar dflash ddtree --chain-budgets 3 5 7 15 --budgets 4 8 16 32 64 \
  --task gsm8k --n-prompts 4 --out results/drafter-gsm8k.jsonl
for t in math500 humaneval mbpp alpaca mt-bench; do
  graft bench --max-new-tokens 256 --methods ar dflash ddtree --chain-budgets 15 --budgets 4 8 16 32 64 --task "$t" \
    --n-prompts 2 --out results/drafter-tasks.jsonl
done
