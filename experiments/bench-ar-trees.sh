#!/usr/bin/env bash
# Measures: Table 1's claim check at CPU-sized trees: EAGLE-3 / OPT-Tree at 8 and 16 nodes (the releases' 60 / 50
#   suit a GPU, where a verify is flat in the node count; on a 2-core CPU each node costs ~1.3 ms of a ~67 ms
#   verify) beside GRAFT and AR, on AR_TREE_TASKS (gsm8k mbpp) x GOALS_N prompts (10) x 256 tokens.
#   TABLE1_SABA=here: GRAFT with this machine's calibration, as in table1-full.sh.
# Takes: about 25 min on a 2-core CPU.
# Results: results/ar-trees[-saba-here].jsonl (resumable).
source "$(dirname "$0")/lib.sh"
GOALS_N=${GOALS_N:-10}
AR_TREE_TASKS=${AR_TREE_TASKS:-gsm8k mbpp}
TABLE1_SABA=${TABLE1_SABA:-}
data
[[ -z "$TABLE1_SABA" ]] || use_saba_here
for t in $AR_TREE_TASKS; do
  graft bench --max-new-tokens 256 --methods ar eagle3@8 eagle3@16 opt-tree@8 opt-tree@16 graft@64 --task "$t" \
    --n-prompts "$GOALS_N" --out "results/ar-trees${TABLE1_SABA:+-saba-here}.jsonl"
done
