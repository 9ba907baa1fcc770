#!/usr/bin/env bash
# Measures: nothing; featurizes the corpora EAGLE3_CORPORA names (CORPUS:DATA_DIR or CORPUS:DATA_DIR:N, the first N
#   shards; default: the DFlash drafter's last stage) with the target (`graft drafter-corpus --to-data`), in
#   FEATURIZE_DTYPE (bfloat16 where the CPU multiplies it natively, else float32) on FEATURIZE_THREADS (2).
# Takes: ~4.6 h of target forwards for the three default corpora on a 2-core AVX2 CPU in float32; ~16 min per 8 chat
#   shards in bfloat16 on an AMX CPU. Resumable per shard.
# Results: runs/<DATA_DIR> per corpus (the training scripts' data).
source "$(dirname "$0")/lib.sh"
data
featurize_corpora
