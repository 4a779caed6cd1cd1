# Each target is a thin shell over one command; `make setup` is the only one that installs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test check mutants explore bench lint clean

setup: $(STAMP)

# Reinstall only when the packaging changes, so `make test` stays quick after the first run.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Two workers, each test module kept on one (the machine modules share a fixture per module).
test: setup
	$(BIN)/pytest -q -n 2 --dist loadfile

# The main job: search the reference for counterexamples, then prove every mutant is caught.
check: setup
	$(BIN)/peftlife check --profile ci --report-dir peftlife-reports
	$(BIN)/peftlife mutants --profile ci --json peftlife-reports/mutants.json

# The mutant gate alone, with its table as JSON.
mutants: setup
	$(BIN)/peftlife mutants --profile ci --json peftlife-reports/mutants.json

# Exhaustive exploration of the smallest kv-pressure world (the reference should hold).
explore: setup
	$(BIN)/peftlife explore --scenario kv-pressure --depth 4

# Speed and shrink goals, measured (not part of `make test`): prints a table and
# writes docs/benchmarks.md, then adds how fuzzing campaigns scale with workers,
# then a soak of every mutant through check and fuzz under a watchdog (fails on a hang),
# then every kind of bad scheduler through every door (bench/robustness.py: fails on a
# hang, a traceback or a door's wrong verdict), then Ctrl-C at every door, inside a
# native hang and mid-shrink (bench/interrupt.py: fails on a slow exit, a traceback or exit 0).
# Then how many examples Hypothesis aborts and whether a hunt reports a finding
# later than its first (bench/findings.py, printed only). Last, the detection
# table: how often and how soon fresh dev runs find each mutant (bench/detection.py).
# BENCH_ARGS=--quick for a shorter run. `make test` runs bench/search.py at its
# --smoke sizes (tests/e2e/test_bench_search.py), which checks the table's shape only.
bench: setup
	$(BIN)/python -m bench.search $(BENCH_ARGS)
	$(BIN)/python -m bench.fuzz --out docs/benchmarks.md
	$(BIN)/python -m bench.soak --out docs/benchmarks.md $(BENCH_ARGS)
	$(BIN)/python -m bench.robustness --out docs/benchmarks.md $(BENCH_ARGS)
	$(BIN)/python -m bench.interrupt --out docs/benchmarks.md
	$(BIN)/python bench/findings.py
	$(BIN)/python -m bench.detection --out docs/benchmarks.md $(if $(BENCH_ARGS),--runs 20 --hunt-seeds 5)

lint: setup
	$(BIN)/ruff check src tests strategies docs bench
	$(BIN)/ruff format --check src tests strategies docs bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .hypothesis .mypy_cache .ruff_cache
