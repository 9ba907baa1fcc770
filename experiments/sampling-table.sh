#!/usr/bin/env bash
# Measures: MAT and speedup of every method at T = 0, 0.6, 1.0 on gsm8k and mt-bench with SAMPLING_N prompts (6) per
#   cell x 64 tokens, and SABA's T = 0 calibration against fits at each T on SAMPLING_SABA_N (2) held-out prompts
#   per task.
# Takes: about 35 min on a 2-core CPU.
# Results: results/sampling-<N>x64/ (the executed sampling_temperature notebook, its records and figures).
source "$(dirname "$0")/lib.sh"
SAMPLING_N=${SAMPLING_N:-6}
SAMPLING_SABA_N=${SAMPLING_SABA_N:-2}
data
nb_run sampling_temperature "results/sampling-${SAMPLING_N}x64" -p n_prompts "$SAMPLING_N" -p max_new_tokens 64 \
  -p budget 16 -p chain_budgets 3 -p cap 64 -p val_prompts 2 -p saba_prompts "$SAMPLING_SABA_N" -p saba_grid 2,4,8 \
  -p saba_max_new_tokens 32 -p saba_repeats 1
