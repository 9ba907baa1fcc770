#!/usr/bin/env bash
# Measures: nothing; ships the EAGLE-3 drafter of eagle3-equal.sh (EAGLE3_OUT, runs/eagle3-equal) into graftlib/assets,
#   with the DFlash drafter's scoring on the same anchors beside it (graftlib/training/drafter/eval_anchors.py).
# Takes: seconds.
# Results: graftlib/assets/drafters/ (the EAGLE-3 drafter and its training record).
source "$(dirname "$0")/lib.sh"
EAGLE3_OUT=${EAGLE3_OUT:-runs/eagle3-equal}
graft ship-eagle3 --from "$EAGLE3_OUT/drafter" --reference "$EAGLE3_OUT-dflash/drafter"
