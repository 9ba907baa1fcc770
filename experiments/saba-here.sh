#!/usr/bin/env bash
# Measures: SABA's calibration on this machine (`graft calibrate`, prepare's settings: 8 validation prompts
#   replayed x 64 tokens); skipped when SABA_HERE already is this machine's. The adaptive methods load it through
#   GRAFT_SABA_PARAMS=SABA_HERE, and their results record its id.
# Takes: about 5 min on a 2-core CPU.
# Results: SABA_HERE (results/saba-here.json).
source "$(dirname "$0")/lib.sh"
data
saba_here
