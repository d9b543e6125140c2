# Two commands for a fresh machine with Python 3.11+: `make run` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test test-random bench lint protos clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	$(BIN)/python -m pip check
	touch $@

# The main job: place a 64-rank Megatron job on a fragmented 256-GPU H100 cluster, next to the baselines,
# and write launch files to out/ (docs/launch.md): an OpenMPI rankfile with each rank's CPU set
# (mpirun --mca rmaps_rank_file_physical 1 --rankfile out/rankfile placement bind -- CMD), the SLURM_HOSTFILE and a
# Slurm script (sbatch out/slurm.sh CMD), and one dotenv file per rank; `placement bind` pins each task to its GPU.
run: $(BIN)/.installed
	mkdir -p out
	$(BIN)/placement place examples/h100-256.yaml examples/llama-13b-tp8-pp2-dp4.yaml --state examples/h100-256-busy.yaml --time-limit 5 --out out/result.json
	$(BIN)/placement export out/result.json --format rankfile --out out/rankfile
	$(BIN)/placement export out/result.json --format hostfile --out out/slurm_hostfile
	$(BIN)/placement export out/result.json --format slurm --out out/slurm.sh
	$(BIN)/placement export out/result.json --format dotenv --out out/env

# Under CI=true the Slurm end-to-end test must run, so Debian's Slurm is installed first (as root; .ci/slurm.sh);
# elsewhere it runs when Slurm is installed and this is root, and skips with the reason otherwise (-rs prints
# every skipped test with its reason).
test: $(BIN)/.installed
	$(BIN)/python -m pip check
	$(BIN)/ruff check placement server tests bench scripts
	$(BIN)/ruff format --check placement server tests bench scripts
	$(BIN)/mypy placement server
	$(BIN)/lint-imports
	$(BIN)/python scripts/import_graph.py placement server  # no import cycle; few, commented function-level imports
	if [ "$${CI:-}" = true ]; then .ci/slurm.sh install; fi
	.ci/postgres.sh exec $(BIN)/python -m pytest -rs

# The suite in a random order (pytest-randomly), SEED=N to repeat one order.
test-random: $(BIN)/.installed
	$(BIN)/python -m pytest -rs -p randomly $(if $(SEED),--randomly-seed=$(SEED),)

bench: $(BIN)/.installed
	$(BIN)/python bench/solver.py

lint: $(BIN)/.installed
	$(BIN)/mypy placement server

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
