#!/usr/bin/env bash
# Measures: the paper's claims under the paper's A100 costs at evidence counts: the paper_regime notebook with the
#   paper regime only (`regime_names=paper`: walked, modeled) on GSM8K, MBPP and Alpaca, CLAIMS_N (6) held-out
#   prompts x CLAIMS_TOKENS (128) tokens each: Tables 1-2's runs, Figure 1(b)'s mismatch, Figure 1(c)'s budget curve
#   (32..512), Figure 5's GSM8K-only scorer, Figure 6's oracle tracking on {32, ..., 128} and Table 3's beta sweep,
#   with C1-C9, F1b, F1c, F5, F6 and T3 in one claims table (the quick profile's is a picture from 2 prompts).
# Takes: about 90 min on a 2-core CPU, most of it EAGLE-3 / OPT-Tree's verified trees of 50-59 nodes (about 1 min a
#   prompt on MBPP's long prompts); every figure here is modeled: other jobs slow it, they do not change it.
# Results: results/paper-claims-<N>x<T>/ (the executed notebook, its records, figures/claims_by_regime.csv);
#   resumable: a re-run goes on with the next prompt.
source "$(dirname "$0")/lib.sh"
CLAIMS_N=${CLAIMS_N:-6}
CLAIMS_TOKENS=${CLAIMS_TOKENS:-128}
data
nb_run paper_regime "results/paper-claims-${CLAIMS_N}x${CLAIMS_TOKENS}" -p regime_names paper \
  -p tasks gsm8k,mbpp,alpaca -p n_prompts "$CLAIMS_N" -p max_new_tokens "$CLAIMS_TOKENS"
