#!/usr/bin/env bash
# Measures: the drafter recipe on a GPU, one process (`graft drafter-pipeline`): target data (batched, float32 target,
#   top-k log-probs, a tenth sampled) for GPU_DATA_MIN minutes (3) kept in memory, then the GPU_VARIANTS drafters
#   trained one after another on it for GPU_TRAIN_MIN minutes (1.5) each: distilled (d1), hard labels (h1), two layers
#   distilled (d2). GPU_PROMPTS: e.g. "--prompts FILE" written by `graft drafter-data --export-prompts FILE
#   --n-prompts 100000` where the prompt sets are not fetched. On an offline machine: gpu-remote.sh drafter-gpu.
# Takes: about 9 min on one H200 (docs/gpu.md).
# Results: GPU_OUT (runs/gpu).
source "$(dirname "$0")/lib.sh"
read -r -a prompts <<< "${GPU_PROMPTS:-}"
read -r -a variants <<< "${GPU_VARIANTS:-d1:0.5:1 h1:0:1 d2:0.5:2}"
graft drafter-pipeline --device cuda --out "${GPU_OUT:-runs/gpu}" --data-minutes "${GPU_DATA_MIN:-3}" \
  --minutes "${GPU_TRAIN_MIN:-1.5}" --variants "${variants[@]}" --blocks-per-step 2048 --lr 8e-4 --eval-every 250 \
  --tau-prompts 8 --tau-tokens 128 "${prompts[@]}"
