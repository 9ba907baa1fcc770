#!/usr/bin/env bash
# Measures: DFlash 2's parts on the embedded drafter (graftlib.models.dflash2): the shipped drafter warm-started with
#   the block-local convolution (2 taps, identity start) and a rank-D2_RANK (64) top-16 selector, trained D2_MIN
#   CPU-minutes (20) at D2_LR (3e-4) beside the plain warm start trained as long ("base"), same data and held-out
#   split, two runs at a time on one thread each (held-out top-1 by depth, offline and in-loop taus in
#   runs/drafter-dflash2/summary.json); then both in the decode loop on GSM8K, MBPP and Alpaca, D2_N (6) held-out
#   prompts x 128 tokens: the chain and DDTree@16 for both drafters, and for the DFlash 2 one also the selector's
#   chain (dflash2) and DDTree@16 reweighted by the selector (ddtree+sel): MAT, mismatch, draft ms a round.
#   A third arm ("selector") trains the selector alone on the frozen shipped drafter (--parts-only: its drafts, and
#   so the shipped TDES scorer and SABA calibration, stay valid): TDES vs the selector vs both at equal budgets on
#   the same drafts, in this machine's regime (DDTree@16, verified and timed, priced by the shipped CPU profile) and
#   the paper's (DDTree@128, walked along AR's tokens, tests/test_selector.py, and priced by paper-a100).
#   On a fresh machine it featurizes D2_CORPORA first (2 chat shards, 6 task shards, 4 regular ones).
# Takes: ~35 min featurizing on a 2-core AVX512-BF16 CPU (resumable per shard), 30 min training (three arms of
#   20 CPU-minutes on two cores), ~40 min of benches.
# Results: runs/drafter-dflash2/{base,dflash2,selector} (+ summary.json), results/drafter-dflash2-<arm>-<task>.jsonl,
#   results/selector-vs-tdes-{machine,paper}-<task>.jsonl and their tables (graftlib.lab.run.edge_scores) in
#   results/selector-vs-tdes-{machine,paper}.csv. `graft ship-dflash2 --from runs/drafter-dflash2/selector/drafter`
#   ships the selector arm as `--drafter embedded-dflash2` (Table 2's notebook then draws the comparison).
source "$(dirname "$0")/lib.sh"
D2_MIN=${D2_MIN:-20}
D2_LR=${D2_LR:-3e-4}
D2_RANK=${D2_RANK:-64}
D2_N=${D2_N:-6}
EAGLE3_CORPORA=${D2_CORPORA:-smollm2-135m:drafter-data-v3:2 smollm2-135m-tasks:drafter-data-tasks-v3:6 smollm2-135m-regular:drafter-data-regular:4}
data
featurize_corpora
mapfile -t corpora < <(corpora_data)
run mkdir -p runs/drafter-dflash2
for arm in "base" "dflash2 --conv-kernel-size 2 --selector-rank $D2_RANK --selector-top-k 16" \
           "selector --selector-rank $D2_RANK --selector-top-k 16 --parts-only"; do
  train_arm runs/drafter-dflash2 "$arm" --data "${corpora[@]}" --init-drafter embedded --minutes "$D2_MIN" \
    --clock cpu --threads 1 --blocks-per-seq 16 --lr "$D2_LR" --eval-every 100000 --tau-prompts 8 \
    --checkpoint-minutes 5
done
wait
write_ablation runs/drafter-dflash2 runs/drafter-dflash2/summary.json base experiments/drafter-dflash2.sh
for task in gsm8k mbpp alpaca; do
  graft bench --drafter runs/drafter-dflash2/base/drafter --task "$task" --n-prompts "$D2_N" --max-new-tokens 128 \
    --methods ar dflash@15 ddtree@16 --out "results/drafter-dflash2-base-$task.jsonl"
  graft bench --drafter runs/drafter-dflash2/dflash2/drafter --task "$task" --n-prompts "$D2_N" --max-new-tokens 128 \
    --methods ar dflash@15 dflash2@15 ddtree@16 ddtree+sel@16 --out "results/drafter-dflash2-dflash2-$task.jsonl"
done
SEL=runs/drafter-dflash2/selector/drafter
for task in gsm8k mbpp alpaca; do
  graft bench --drafter "$SEL" --task "$task" --n-prompts "$D2_N" --max-new-tokens 128 \
    --methods ar ddtree@16 ddtree+tdes@16 ddtree+sel@16 ddtree+tdes+sel@16 --out "results/selector-vs-tdes-machine-$task.jsonl"
  graft bench --walk --drafter "$SEL" --task "$task" --n-prompts "$D2_N" --max-new-tokens 128 \
    --cost-profile graftlib/assets/costs/paper-a100.json \
    --methods ar ddtree@128 ddtree+tdes@128 ddtree+sel@128 ddtree+tdes+sel@128 --out "results/selector-vs-tdes-paper-$task.jsonl"
done
# the comparison's tables (graftlib.lab.run.edge_scores), one per regime, pooled and per task
run "$BIN/python" - <<'PY'
from graftlib.core.records import read_records
from graftlib.lab.run.edge_scores import edge_score_table
from graftlib.lab.run.regimes import machine, paper

for name, regime in (("machine", machine(budget=16)), ("paper", paper())):
    records = [r for task in ("gsm8k", "mbpp", "alpaca") for r in read_records(f"results/selector-vs-tdes-{name}-{task}.jsonl")]
    edge_score_table(records, regime).round(4).to_csv(f"results/selector-vs-tdes-{name}.csv")
PY
