# Two commands for a fresh machine with Python 3.11+: `make run` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test bench lint protos clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip check
	touch $@

# The main job: place a 64-rank Megatron job on a fragmented 256-GPU H100 cluster, next to the baselines,
# and write the launcher files (OpenMPI rankfile, SLURM_HOSTFILE, per-rank environment) to out/.
run: $(BIN)/.installed
	mkdir -p out
	$(BIN)/placement place examples/h100-256.yaml examples/llama-13b-tp8-pp2-dp4.yaml --state examples/h100-256-busy.yaml --time-limit 5 --out out/result.json
	$(BIN)/placement export out/result.json --format rankfile --out out/rankfile
	$(BIN)/placement export out/result.json --format hostfile --out out/slurm_hostfile
	$(BIN)/placement export out/result.json --format env --out out/env.txt

test: $(BIN)/.installed
	$(BIN)/python -m pip check
	$(BIN)/ruff check placement server tests bench scripts
	$(BIN)/mypy placement server
	.ci/postgres.sh exec $(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/python bench/solver.py

lint: $(BIN)/.installed
	$(BIN)/mypy placement server

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
