#!/usr/bin/env bash
# Measures: the paper's claims under the paper's costs and acceptance (the third regime, a construction): the drafter
#   strength per task calibrated to the paper's DFlash chain MAT and to a real DFlash drafter's first miss and sibling
#   continuation (`graft calibrate-strength`, with its validation: DDTree@128's MAT against the paper's, the spine's
#   continuation, the true token in the top-3 at the first miss), GRAFT's parts (TDES scorers, SABA
#   under the paper's costs) fitted on that construction (`graft prepare --strength`), then Tables 1-2's runs on GSM8K,
#   MBPP and Alpaca, ACC_N (10) held-out prompts x ACC_TOKENS (128) tokens, the DFlash-drafted runs walked at the task's
#   strength and everything priced by the paper's A100 costs, with C1-C9 per task and pooled (`graft modeled`); and
#   the strength axis on GSM8K (notebook strength_axis: every claim's ratio against s).
# Takes: calibration about 60 min (6 tasks; the construction's spine costs target forwards), prepare about 40 min, benches about 30 min (EAGLE-3 / OPT-Tree's verified trees dominate),
#   the axis about 25 min, on a 2-core CPU; every figure is modeled, so other jobs slow it without changing it.
# Results: graftlib/assets/strength/paper-qwen3-8b.json (the shipped calibration: resumable by task), the parts
#   shipped as graftlib/assets/tdes/paper-acceptance*.* and saba/paper-acceptance.json,
#   results/paper-acceptance.jsonl and its `graft modeled` report, results/strength-axis/ (notebook, figures).
source "$(dirname "$0")/lib.sh"
ACC_N=${ACC_N:-10}
ACC_TOKENS=${ACC_TOKENS:-128}
STRENGTH=graftlib/assets/strength/paper-qwen3-8b.json
PAPER_COSTS=(--tdes graftlib/assets/tdes/paper-acceptance.safetensors --saba graftlib/assets/saba/paper-acceptance.json
  --cost-profile graftlib/assets/costs/paper-a100.json)
data
graft calibrate-strength --tasks gsm8k mbpp alpaca swe-bench math500 humaneval --n-prompts "$ACC_N" \
  --max-new-tokens "$ACC_TOKENS" --out "$STRENGTH"
graft prepare --device cpu --strength "$STRENGTH" --task-scorers gsm8k --ship
for task in gsm8k mbpp alpaca; do
  graft bench --walk --strength "$STRENGTH" "${PAPER_COSTS[@]}" --task "$task" --n-prompts "$ACC_N" \
    --max-new-tokens "$ACC_TOKENS" --out results/paper-acceptance.jsonl --methods ar dflash@15 ddtree@8 ddtree@16 \
    ddtree@32 ddtree@64 ddtree@128 ddtree@256 ddtree+tdes@128 ddtree+saba@512 graft@512 caddtree@512 eagle3@59 opt-tree@50
done
graft modeled --results results/paper-acceptance.jsonl --cost-profile graftlib/assets/costs/paper-a100.json \
  --budget 128 --cap 512
nb_run strength_axis results/strength-axis -p task gsm8k -p n_prompts "$ACC_N" -p max_new_tokens "$ACC_TOKENS" \
  -p strengths 0,0.1,0.2,0.3,0.4,0.5,0.7 -p paper_budgets 8,16,32,64,128,256
