#!/usr/bin/env bash
# Measures: the third regime (the paper's costs and acceptance, a construction) under each drafter-strength calibration,
#   so that every tree claim is decided across the bracket of the drafter's tree gain over its chain: the `pinned`
#   calibration (lam fitted so that DDTree@128 also accepts the paper's DDTree MAT, s, kappa and tau kept from
#   own-spine: `graft calibrate-strength --pin tree --shape-from own-spine`), GRAFT's parts fitted on the `true-path` and
#   `pinned` constructions (`graft prepare --strength NAME --ship`: tdes/paper-acceptance-<name>*.*,
#   saba/paper-acceptance-<name>.json), then the paper_regime notebook at evidence counts, which decodes the
#   paper+pinned and paper+true-path regimes' benches and sweeps (every other regime's are read from figures/records)
#   and packs their records into figures/records.
# Takes: calibration about 50 min (6 tasks; lam < 1 costs target forwards), each prepare 40-50 min, the notebook about
#   2 h on a 2-core CPU (budget_policies decodes its own replays when the workbook is redrawn); every step resumes.
# Results: graftlib/assets/strength/paper-qwen3-8b-pinned.json, the parts above, figures/records/*.jsonl.gz (commit
#   them as the redraw's checkpoint), then `experiments/redraw-evidence.sh` redraws every figure from one commit.
source "$(dirname "$0")/lib.sh"
THREADS=${BRACKET_THREADS:-2}
data
graft calibrate-strength --pin tree --shape-from own-spine --tasks gsm8k mbpp alpaca swe-bench math500 humaneval \
  --n-prompts 10 --max-new-tokens 128 --out graftlib/assets/strength/paper-qwen3-8b-pinned.json
for name in true-path pinned; do
  graft prepare --device cpu --threads "$THREADS" --strength "$name" --task-scorers gsm8k --ship
done
graft workbook --profile evidence --only paper_regime --out results/strength-bracket
