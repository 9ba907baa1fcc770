#!/usr/bin/env bash
# Measures: the components: chain, DDTree at B = 4, 8, 16, +TDES at 8 vs +SABA / GRAFT / CaDDTree capped at 64, on
#   six tasks x N prompts (N=6) x 256 tokens.
# Takes: about 2 h on a 2-core CPU.
# Results: results/graft-components.jsonl (resumable).
source "$(dirname "$0")/lib.sh"
N=${N:-6}
data
for t in gsm8k math500 humaneval mbpp alpaca mt-bench; do
  graft bench --max-new-tokens 256 --methods ar dflash ddtree ddtree+tdes@8 ddtree+saba graft caddtree \
    --chain-budgets 3 --budgets 4 8 16 --caps 64 --task "$t" --n-prompts "$N" --out results/graft-components.jsonl
done
