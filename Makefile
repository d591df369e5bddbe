# The README's two commands are `make demo` and `make test`; both do all set-up
# on a fresh clone (virtualenv, editable install with dev extras, Delta jars)
# and skip what is already done.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
PYTEST_ARGS ?=
# make test runs the suite in this many worker processes (pytest-xdist; each worker has its own Spark
# session and PostgreSQL; a test module runs whole in one worker, so module fixtures are built once);
# PYTEST_WORKERS=0 runs it in one process. Its temporary folders (embedded PostgreSQL data, lakes) live
# in .tmp/pytest, emptied at each run: pytest's shared /tmp/pytest-of-<user> is pruned by other runs.
PYTEST_WORKERS ?= 2

.PHONY: setup lint demo test test-fast system cluster bench soak wheel clean-setup

setup: $(VENV)/.installed
	@$(VPY) -m cdc_apply.spark.jars

$(VENV)/.installed: pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@echo "installing cdc_apply and its pinned dependencies into $(VENV) ..."
	@$(VPY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

demo: setup
	@$(VENV)/bin/cdc-apply demo

# The lint gate, run before the tests (seconds): mypy over cdc_apply ([tool.mypy] in pyproject.toml:
# 0 errors) and ruff's rules ([tool.ruff]: pycodestyle E, pyflakes F, sorted imports I) over cdc_apply.
lint: $(VENV)/.installed
	@$(VPY) -m mypy
	@$(VENV)/bin/ruff check cdc_apply

test: setup lint
	@mkdir -p .tmp
	@$(VPY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --basetemp "$(CURDIR)/.tmp/pytest" \
		-m "not system and not connect" $(PYTEST_ARGS)

# The system tests (markers `system` and `connect`; make test leaves them to this target): the real command
# line and other JVMs in subprocesses — the crash tests (tests/crash: land and apply SIGKILLed at random
# moments, first runs included, run again and silver compared with PostgreSQL, ~4 minutes a seed on 2
# cores; two of each command started together), everything over the local Spark Connect server (a second
# JVM), a failed batch's output under the CLI and spark-submit, the wheel in a fresh virtualenv. .ci/run
# runs both targets. A module's tests run in one worker (its fixture starts JVMs), the Connect tests in
# one, each crash seed on its own (tests/conftest.py: pytest_xdist_make_scheduler).
# One crash seed a run, from the number of commits, so successive commits rotate through the seeds: KILL_SEEDS=1,2,3,4
# runs them all (make soak does), KILL_SEEDS=3 one of them again.
KILL_SEED_COUNT := 4
KILL_SEEDS ?= $(shell echo $$(( $$(git rev-list --count HEAD 2>/dev/null || echo 0) % $(KILL_SEED_COUNT) + 1 )))
system: setup
	@mkdir -p .tmp
	@echo "crash seeds: $(KILL_SEEDS) (KILL_SEEDS=1,2,3,4 runs every seed)"
	@CDC_APPLY_KILL_SEEDS=$(KILL_SEEDS) $(VPY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope \
		--basetemp "$(CURDIR)/.tmp/system" -m "(system or connect) and not cluster" $(PYTEST_ARGS)

# The cluster tests (marker `cluster`, tests/cluster; docs/CLUSTER.md): the apply job under spark-submit on a
# real standalone cluster (a master and two workers from pip's pyspark on 127.0.0.1) whose executors' Python
# has no cdc_apply, and land / apply (killed and run again) / status with every table on s3a:// against
# moto's S3 server. Set-up, done once: moto (the `cluster` extra), the s3a jars (hadoop-aws at Spark's
# Hadoop version and the AWS SDK bundle, ~640 MB, into .jars-s3/), the executors' virtualenv
# (.tmp/executor-python: pyarrow and numpy only). One test process: the s3a session is the fixture's.
cluster: setup $(VENV)/.installed-cluster
	@$(VPY) -m cdc_apply.spark.jars --s3
	@mkdir -p .tmp
	@$(VPY) -m pytest -n 0 --basetemp "$(CURDIR)/.tmp/cluster" -m cluster tests/cluster $(PYTEST_ARGS)

$(VENV)/.installed-cluster: pyproject.toml $(VENV)/.installed
	@$(VPY) -m pip install -q --disable-pip-version-check -e '.[dev,cluster]'
	@touch $@

# The fast lane: the tests that need no JVM, no PostgreSQL and no wheel build (pure Python; no Delta
# jars needed). `make test` runs these and the rest.
test-fast: $(VENV)/.installed
	@$(VPY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not spark and not postgres and not packaging" $(PYTEST_ARGS)

# The wheel a cluster installs (dist/cdc_apply-<version>-py3-none-any.whl); built offline with the
# virtualenv's setuptools.
wheel: setup
	@rm -rf build    # setuptools' staging folder: files left there from an earlier build would be packaged
	@$(VPY) -m pip wheel -q --no-deps --no-build-isolation --no-index --wheel-dir dist .
	@ls dist/cdc_apply-*.whl

# Every benchmark through one runner (~4 hours on 2 cores; a quiet machine), or some of them:
#   make bench BENCHES="decode wide"     (the steps: .venv/bin/python -m bench.run --list)
BENCHES ?=
bench: setup
	@$(VPY) -m bench.run $(BENCHES)

# The soak: every crash seed of tests/crash/test_kill_anywhere.py (~4 minutes each), then the differential
# soak: >= 100,000 seeded random transactions, silver compared with PostgreSQL at
# 8 checkpoints. Two configurations span the protocol (1: text, no streaming, no two-phase; 4: parallel
# streaming, two-phase, binary): ~55 minutes here. All six take several hours on 2 cores:
#   make soak SOAK_CONFIGS=v1,v1_binary,v2_stream,v3_twophase,v4_parallel,v4_parallel_binary
SOAK_SEED ?= 1122
SOAK_TRANSACTIONS ?= 100000
SOAK_CONFIGS ?= v1,v4_parallel_binary
# SOAK_HISTORY=1: history tables on, checked against the source's state after every transaction and
# read_as_of against PostgreSQL at each checkpoint (docs/HISTORY.md).
SOAK_HISTORY ?=
soak: setup
	@mkdir -p .tmp
	@CDC_APPLY_KILL_SEEDS=1,2,3,4 $(VPY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope \
		--basetemp "$(CURDIR)/.tmp/soak" tests/crash/test_kill_anywhere.py $(PYTEST_ARGS)
	@$(VPY) -m cdc_apply.testing.differential --seed $(SOAK_SEED) --transactions $(SOAK_TRANSACTIONS) \
		--checkpoints 8 --configs $(SOAK_CONFIGS) --workdir bench/work/soak --result bench/soak.json \
		$(if $(SOAK_HISTORY),--history)

clean-setup:
	rm -rf $(VENV) .jars .jars-s3
