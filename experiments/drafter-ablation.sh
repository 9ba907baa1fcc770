#!/usr/bin/env bash
# Measures: the drafter's design choices (target-initialized layers, two layers, a 16k draft vocabulary, fp32), each
#   against the shipped recipe at the same time budget ABLATE_MIN (6 min) on the same data and held-out split.
# Takes: 5 x ABLATE_MIN minutes.
# Results: runs/drafter-ablation/<arm>, then graftlib/assets/drafters/smollm2-135m-dflash/ablation.json (shown by the
#   train_drafter notebook).
source "$(dirname "$0")/lib.sh"
ABLATE_MIN=${ABLATE_MIN:-6}
read -r -a ablate_data <<< "${ABLATE_DATA:-runs/drafter-data-tasks runs/drafter-data}"
data
for arm in "base" "target-init --init-from-target" "layers2 --layers 2" "vocab16k --draft-vocab 16384" "fp32 --fp32"; do
  read -r -a words <<< "$arm"
  out=runs/drafter-ablation/${words[0]}
  [[ -d "$out/drafter" ]] && continue
  graft train-drafter --data "${ablate_data[@]}" --out "$out" --minutes "$ABLATE_MIN" --eval-every 100000 \
    --tau-prompts 4 $(resume_flag "$out") "${words[@]:1}"
done
write_ablation runs/drafter-ablation graftlib/assets/drafters/smollm2-135m-dflash/ablation.json
