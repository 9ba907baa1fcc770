#!/usr/bin/env bash
# Measures: every committed figure redrawn by the evidence profile (`graft workbook --profile evidence`) from one clean
#   commit, resumed from the committed records (figures/records) and, where one exists, from a partial redraw's
#   records (REDRAW_CHECKPOINT, written by `graft records pack --results results/evidence --archive DIR`); then the
#   README's results section from the new claims table (`graft results --readme README.md`).
# Takes: about 15 min where every decode is in the records; after the paper regimes' artifacts change, about 3 h on a
#   2-core CPU (their benches and replays decode again, the drafter-strength construction's the slowest).
# Results: figures/ (PNG, PDF, CSV, findings, manifest.json, records/) and README.md's results section; commit them.
source "$(dirname "$0")/lib.sh"
CHECKPOINT=${REDRAW_CHECKPOINT:-experiments/checkpoints/redraw}
if [[ -d "$CHECKPOINT" ]]; then
  graft records unpack --archive "$CHECKPOINT" --results results/evidence
fi
graft workbook --profile evidence
graft results --readme README.md
