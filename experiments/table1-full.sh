#!/usr/bin/env bash
# Measures: Table 1 with all six columns (AR, the chain, DDTree, EAGLE-3, OPT-Tree, GRAFT) on the six tasks at
#   TABLE1_N prompts (10) x 256 tokens; TABLE1_SABA=here runs GRAFT with a calibration fitted on this machine
#   (saba-here.sh first), into its own folder.
# Takes: about 80 min on a 2-core CPU (+5 min with TABLE1_SABA=here).
# Results: results/table1-<N>x256[-saba-here]/ (the executed notebook, its records and figures).
source "$(dirname "$0")/lib.sh"
TABLE1_N=${TABLE1_N:-10}
TABLE1_SABA=${TABLE1_SABA:-}
data
dir=results/table1-${TABLE1_N}x256${TABLE1_SABA:+-saba-here}
[[ -z "$TABLE1_SABA" ]] || use_saba_here
nb_run table1_main_results "$dir" -p tasks gsm8k,mbpp,alpaca,math500,humaneval,mt-bench -p n_prompts "$TABLE1_N" \
  -p max_new_tokens 256 -p budgets 4,8 -p chain_budgets 3,15 -p cap 64
