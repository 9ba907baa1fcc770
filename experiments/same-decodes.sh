#!/usr/bin/env bash
# Measures: that a change leaves every decode as it was: the same bench (GSM8K, 3 held-out prompts x 64 tokens, the
#   methods of METHODS) at two commits (arguments; default HEAD~1 and HEAD), each from its own worktree, and per
#   record the deterministic columns (per-round accepted lengths and tree shapes, rounds, nodes, parent-child
#   mismatches, new tokens, the exactness verdict) compared; wall-clock columns are left out.
# Takes: about 6 min on a 2-core CPU.
# Results: results/same-decodes/<commit>.jsonl; prints "identical" or each record that differs (exit 1).
source "$(dirname "$0")/lib.sh"
OLD=${1:-HEAD~1}
NEW=${2:-HEAD}
METHODS=${METHODS:-ar dflash@15 ddtree@16 ddtree+tdes@16 ddtree+saba@64 graft@64 caddtree@64}
OUT=results/same-decodes
read -r -a methods <<< "$METHODS"
files=()
for rev in "$OLD" "$NEW"; do
  commit=$(git rev-parse --short "$rev")
  tree=$OUT/tree-$commit
  [[ -d "$tree" ]] || run git worktree add --detach "$tree" "$commit"
  PYTHONPATH=$PWD/$tree graft bench --task gsm8k --n-prompts 3 --max-new-tokens 64 --methods "${methods[@]}" \
    --no-warmup --out "$OUT/$commit.jsonl"
  files+=("$OUT/$commit.jsonl")
done
run "$BIN/python" -c "import sys; from graftlib.lab.report.metrics import same_decodes; \
sys.exit(same_decodes('${files[0]}', '${files[1]}'))"
