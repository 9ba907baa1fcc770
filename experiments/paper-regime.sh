#!/usr/bin/env bash
# Measures: the paper's cost regime on the embedded pair. Re-derives the paper's A100 cost profile from its tables
#   (`graft paper-costs`: the residuals of every row), fits SABA's gain on the paper's grid (32..512 by 16) walked under
#   that profile (`graft calibrate --cost-profile`, what `graft prepare` step 4 ships as
#   graftlib/assets/saba/paper-a100.json), then GSM8K REGIME_N (10) held-out prompts x 256 tokens for every method
#   twice: deciding and priced under the paper's profile (the chain, DDTree at 64 / 128 / 256, +TDES@128, +SABA,
#   GRAFT and CaDDTree capped at 512 walked along AR's tokens, `graft bench --walk`; EAGLE-3 and OPT-Tree at their
#   releases' budgets verified) and under this machine's (CPU budgets, every decode verified against AR); then SABA's
#   same-prefix oracle tracking on Figure 6's budget set {32, 48, 64, 80, 96, 128} under the paper's costs on
#   ORACLE_N (3) GSM8K prompts. `graft modeled` prints the tables and the claims under each profile.
# Takes: calibration about 20 min, the paper-regime bench about 15, this machine's about 30, the oracle about 10 min
#   on a 2-core CPU.
# Results: results/saba-paper-a100.json (+ its per-prompt checkpoint), results/paper-regime.jsonl,
#   results/cpu-regime.jsonl, results/paper-oracle.jsonl; each resumable (a re-run goes on with the next prompt).
source "$(dirname "$0")/lib.sh"
REGIME_N=${REGIME_N:-10}
ORACLE_N=${ORACLE_N:-3}
PAPER_PROFILE=graftlib/assets/costs/paper-a100.json
SABA_PAPER=${SABA_PAPER:-results/saba-paper-a100.json}
data
graft paper-costs
graft calibrate --cost-profile "$PAPER_PROFILE" --grid $(seq 32 16 512) --ref-budget 128 --val-prompts 16 \
  --regular-prompts 8 --max-new-tokens 64 --checkpoint results/saba-paper-a100-replay.jsonl --out "$SABA_PAPER"
graft bench --walk --task gsm8k --n-prompts "$REGIME_N" --max-new-tokens 256 --saba "$SABA_PAPER" --cost-profile "$PAPER_PROFILE" \
  --methods ar dflash@15 ddtree@64 ddtree@128 ddtree@256 ddtree+tdes@128 ddtree+saba@512 graft@512 caddtree@512 \
  eagle3@59 opt-tree@50 --out results/paper-regime.jsonl
graft bench --task gsm8k --n-prompts "$REGIME_N" --max-new-tokens 256 \
  --methods ar dflash@3 dflash@15 ddtree@8 ddtree@16 ddtree+tdes@16 ddtree+saba@64 graft@64 caddtree@64 \
  eagle3@59 opt-tree@50 --out results/cpu-regime.jsonl
graft replay --method graft --budget 128 --grid 0 32 48 64 80 96 128 --task gsm8k --prompts "$ORACLE_N" \
  --max-new-tokens 256 --saba "$SABA_PAPER" --cost-profile "$PAPER_PROFILE" --out results/paper-oracle.jsonl
graft modeled --results results/paper-regime.jsonl --cost-profile "$PAPER_PROFILE" --budget 128 --cap 512
graft modeled --results results/cpu-regime.jsonl --budget 16 --cap 64
