#!/usr/bin/env bash
# Measures: the adaptive method a user can leave on, on a mixed held-out workload (graftlib.lab.run.mix: GSM8K,
#   MATH500, MBPP, HumanEval, Alpaca, SWE-bench, MT-Bench first and second turns, the regular set). Step `fit`:
#   graft+pred's predictor with its AR arm (budget 0 in the grid), fitted on VAL validation prompts of each
#   category's task (the last eval prompts where a task has no validation split), timed on this machine. Step
#   `bench`: each task's N held-out prompts x 128 tokens decoded interleaved per prompt after a warm-up, AR
#   bracketing: AR, DDTree and DDTree+TDES at every budget of a grid that brackets each category's best, the
#   paper's graft, graft+stop and graft+pred with that predictor (cap 64); every decode checked against AR.
#   `graftlib.lab.report.budget_policy.mix_rows` compares graft+pred with the best single fixed budget for the
#   mix and with each category's own (the budget_policies notebook's mix rows; docs/budget-policies.md).
# Takes: fit about 40 min (8 tasks x 4 prompts), bench about 30 min a task (SWE-bench's 1.6k-token prompts more), on
#   an idle 2-core CPU (the wall-clock columns are the point); run it as `experiments/adaptive-mix.sh fit`, then
#   `experiments/adaptive-mix.sh bench TASK` task by task: each step resumes by prompt.
# Results: results/adaptive-mix/{val.jsonl,predictor.json,<task>.jsonl}; commit the predictor and the bench
#   records' compact copy (`graft records pack`) for the figure to redraw without decoding.
source "$(dirname "$0")/lib.sh"
OUT=results/adaptive-mix
N=${N:-10}
VAL=${VAL:-4}
TASKS="gsm8k math500 mbpp humaneval alpaca swe-bench mt-bench regular"
step=${1:-fit}
data
case "$step" in
  fit)
    graft fit-predictor --replay-prompts "$VAL" --tasks $TASKS --grid 0,2,4,8,12,16,24,32 --max-new-tokens 128 \
      --replays "$OUT/val.jsonl" --out "$OUT/predictor.json" ;;
  bench)
    for task in ${2:-$TASKS}; do
      graft bench --task "$task" --n-prompts "$N" --max-new-tokens 128 \
        --methods ar ddtree ddtree+tdes graft graft+stop graft+pred --budgets 2 4 8 16 32 --caps 64 \
        --predictor "$OUT/predictor.json" --out "$OUT/$task.jsonl"
    done ;;
  *) echo "adaptive-mix.sh: step $step: fit or bench [TASK]" >&2; exit 2 ;;
esac
