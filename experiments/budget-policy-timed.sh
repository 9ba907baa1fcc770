#!/usr/bin/env bash
# Measures: the budget-policy issue's timed rows on this machine, interleaved per prompt after a warm-up:
#   (1) GSM8K, 10 held-out prompts x 128 tokens: graft+pred, graft+stop and the paper's graft (cap 64) against
#       DDTree and DDTree+TDES at every fixed budget of a grid that brackets their optimum (2..32);
#   (2) MT-Bench first turns and the regular set, 10 prompts x 128 tokens each: the three policies against AR,
#       the text where drafting need not pay.
# Takes: about 45 min on a 2-core CPU (idle: the wall-clock columns are the point).
# Results: results/budget-policy-timed/{gsm8k,mt-bench,regular}.jsonl (resumable); `graftlib.lab.report.budget_policy
#   .timed_rows` reads them (docs/budget-policies.md).
source "$(dirname "$0")/lib.sh"
OUT=results/budget-policy-timed
N=${N:-10}
POLICIES="graft graft+stop graft+pred"
data
graft bench --task gsm8k --n-prompts "$N" --max-new-tokens 128 --methods ar ddtree ddtree+tdes $POLICIES \
  --budgets 2 4 8 16 32 --caps 64 --out "$OUT/gsm8k.jsonl"
graft bench --task mt-bench --turns 1 --n-prompts "$N" --max-new-tokens 128 --methods ar $POLICIES --caps 64 \
  --out "$OUT/mt-bench.jsonl"
graft bench --task regular --n-prompts "$N" --max-new-tokens 128 --methods ar $POLICIES --caps 64 \
  --out "$OUT/regular.jsonl"
