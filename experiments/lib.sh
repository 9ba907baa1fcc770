# Shared by the experiment scripts (sourced, not run): the repository root as working directory, the venv's
# commands, and `run`, through which every command goes: with DRY_RUN=1 it prints the command (shell-quoted,
# one line) instead of running it, which is how tests/test_experiments.py checks each script's graft commands.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv}
BIN=$VENV/bin
GRAFT=${GRAFT:-$BIN/graft}
read -r -a GRAFT_CMD <<< "$GRAFT"  # GRAFT may be a command line, e.g. "python3 -m graftlib"

run() {
  if [[ -n "${DRY_RUN:-}" ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}

# run_bg LOG CMD...: CMD in the background, its output into LOG (printed only, with DRY_RUN); `wait` collects it.
run_bg() {
  local log=$1; shift
  if [[ -n "${DRY_RUN:-}" ]]; then printf '%q ' "$@"; echo; else "$@" > "$log" 2>&1 & fi
}

graft() { run "${GRAFT_CMD[@]}" "$@"; }

# The prompt sets (the user's `make data`).
data() { run make --no-print-directory data; }

# nb_run NOTEBOOK DIR [papermill -p NAME VALUE ...]: a notebook at other counts than the quick profile's, into its
# own folder DIR (the executed notebook, its results and figures there; figures/ stays what `make main` draws).
# Resumable: the benches' records are keyed, so a re-run goes on with the next prompt.
nb_run() {
  local nb=$1 dir=$2; shift 2
  run mkdir -p "$dir"
  run "$BIN/papermill" "notebooks/$nb.ipynb" "$dir/$nb.ipynb" --kernel python3 -p profile quick \
    -p results_dir "$dir" -p figures_dir "$dir/figures" "$@"
}

# SABA fitted on this machine (`graft calibrate`, ~5 min on 2 cores) into SABA_HERE, unless that file already is
# this machine's. The paper fits C_t on the hardware it decodes on; the shipped calibration warns on another.
SABA_HERE=${SABA_HERE:-results/saba-here.json}
saba_here() {
  if [[ -z "${DRY_RUN:-}" ]] && "$BIN/python" -c "import sys, torch; from graftlib.core.hardware import hardware_id; \
from graftlib.methods.saba_params import SabaParams; \
sys.exit(SabaParams.load('$SABA_HERE').meta.get('hardware') != hardware_id(torch.device('cpu')))" 2>/dev/null; then
    return 0
  fi
  graft calibrate --device cpu --out "$SABA_HERE"
}

# saba_here, then the adaptive methods of this script load it ($GRAFT_SABA_PARAMS; printed with DRY_RUN).
use_saba_here() {
  saba_here
  export GRAFT_SABA_PARAMS="$PWD/$SABA_HERE"
  [[ -z "${DRY_RUN:-}" ]] || echo "export GRAFT_SABA_PARAMS=$GRAFT_SABA_PARAMS"
}

# The target's compute dtype for featurizing: bfloat16 where the CPU multiplies bf16 natively (AMX or AVX512-BF16:
# a 2048 x 576 x 1536 GEMM on one AMD EPYC core 385 GFLOP/s in bf16 vs 95 in fp32), else float32.
FEATURIZE_THREADS=${FEATURIZE_THREADS:-2}
if [[ -z "${FEATURIZE_DTYPE:-}" ]]; then
  FEATURIZE_DTYPE=$(grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo 2>/dev/null && echo bfloat16 || echo float32)
fi

# The corpora of the DFlash drafter's last stage, as CORPUS:DATA_DIR or CORPUS:DATA_DIR:N (the first N shards).
EAGLE3_CORPORA=${EAGLE3_CORPORA:-smollm2-135m:drafter-data-v3 smollm2-135m-tasks:drafter-data-tasks-v3 smollm2-135m-regular:drafter-data-regular}

# The featurized data dirs of EAGLE3_CORPORA, in its order (one held-out split).
corpora_data() {
  local entry
  for entry in $EAGLE3_CORPORA; do IFS=: read -r _ dir _ <<< "$entry"; echo "runs/$dir"; done
}

# Featurize EAGLE3_CORPORA (`graft drafter-corpus --to-data`), resumable per shard.
featurize_corpora() {
  local entry corpus dir shards
  for entry in $EAGLE3_CORPORA; do
    IFS=: read -r corpus dir shards <<< "$entry"
    graft drafter-corpus --corpus "data/corpus/$corpus" --to-data "runs/$dir" --threads "$FEATURIZE_THREADS" \
      --dtype "$FEATURIZE_DTYPE" ${shards:+--shards "$shards"}
  done
}

# The flag that continues a run from its checkpoint, if it has one.
resume_flag() { [[ -d "$1/checkpoint" ]] && echo --resume || true; }

# train_arm DIR "NAME FLAGS..." ARGS...: one arm of a side-by-side drafter A/B in the background into DIR/NAME
# (`graft train-drafter ARGS FLAGS`, its output in DIR/NAME.log): a finished arm is kept, an interrupted one resumes.
train_arm() {
  local dir=$1 words out
  read -r -a words <<< "$2"
  shift 2
  out=$dir/${words[0]}
  [[ -d "$out/drafter" ]] && return 0
  run_bg "$out.log" "${GRAFT_CMD[@]}" train-drafter --out "$out" "$@" $(resume_flag "$out") "${words[@]:1}"
}

# write_ablation RUNS_DIR OUT [BASELINE COMMAND]: the summary of side-by-side drafter runs.
write_ablation() {
  run "$BIN/python" -c "from graftlib.training.drafter.dflash_train import write_ablation as w; \
w('$1', '$2'${3:+, baseline='$3', command='$4'})"
}
