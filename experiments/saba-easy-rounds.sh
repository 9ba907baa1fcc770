#!/usr/bin/env bash
# Measures: SABA on easy rounds: the regular set's eval prompts (EASY_N = 10 x 128 tokens) with AR, the chain at 3
#   and 15, DDTree@16, +TDES@16, CaDDTree, +SABA and GRAFT capped at 64 (MAT, budgets chosen, speedups, exactness),
#   then SABA's same-prefix oracle tracking (GRAFT's trajectory replayed over 0..64 nodes) on ORACLE_N (3)
#   regular and GSM8K eval prompts x 128 tokens.
# Takes: about 25 min on a 2-core CPU.
# Results: results/easy-rounds.jsonl (bench), results/easy-rounds-replay.jsonl (replay); resumable.
source "$(dirname "$0")/lib.sh"
EASY_N=${EASY_N:-10}
ORACLE_N=${ORACLE_N:-3}
data
graft bench --methods ar dflash@3 dflash@15 ddtree@16 ddtree+tdes@16 caddtree@64 ddtree+saba@64 graft@64 \
  --task regular --n-prompts "$EASY_N" --max-new-tokens 128 --out results/easy-rounds.jsonl
for t in regular gsm8k; do
  graft replay --method graft --budget 64 --grid 0 1 2 4 8 16 32 64 --task "$t" --prompts "$ORACLE_N" \
    --max-new-tokens 128 --out results/easy-rounds-replay.jsonl
done
