# The two commands on a fresh clone: `make demo` and `make test`. Each installs what is
# missing and starts the services it needs. `make test-all` is `make test` plus the long tier
# (tests/long_tier.txt: the install into a fresh Airflow, the standalone cluster, the CDC lives); CI runs it.
SHELL := /bin/bash
ENV := source scripts/env.sh &&

.PHONY: install services stop demo test test-all lint docs up down cluster cluster-stop bench soak fuzz clean

install:
	@scripts/bootstrap.sh

services: install
	@$(ENV) python scripts/services.py start

stop:
	@$(ENV) python scripts/spark_cluster.py stop && python scripts/services.py stop

demo: services
	@$(ENV) python -m devstack.cdc_demo && $(ENV) reprocess demo

test: services
	@$(ENV) scripts/run_tests.sh $(PYTEST_ARGS)

test-all: services
	@$(ENV) REPROCESS_TEST_TIER=all scripts/run_tests.sh $(PYTEST_ARGS)

# The Airflow UI (airflow standalone) on 127.0.0.1, port REPROCESS_UI_PORT (18080); prints URL, user, password.
up: services
	@$(ENV) python scripts/airflow_ui.py up

down:
	@$(ENV) python scripts/airflow_ui.py down

# A Spark standalone cluster on 127.0.0.1 (master REPROCESS_SPARK_MASTER_PORT, two workers of 1 core and
# 1 GiB); prints the variables that point the DAGs' spark_default at it. Stopped by cluster-stop and stop.
cluster: services
	@$(ENV) python scripts/spark_cluster.py start

cluster-stop:
	@$(ENV) python scripts/spark_cluster.py stop

# ruff over the tree, the type checker over the library, then the documentation site.
lint: install
	@$(ENV) ruff check . && ruff format --check . && mypy
	@$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml): docs/ built into site/ (git-ignored). --strict: a warning fails the
# build, and mkdocs.yml's validation makes one of a link to a missing page or anchor. The theme's banner
# about its end of life is switched off (NO_MKDOCS_2_WARNING). Not --quiet: it hides the warnings strict counts,
# and the build passes.
docs: install
	@$(ENV) NO_MKDOCS_2_WARNING=1 mkdocs build --strict

# Benchmarks (docs/benchmarks.md, the bench/ package): N = 1M with the scale curve and the Airflow run, the peers
# (Debezium JDBC sink, a Spark AvailableNow job, a Flink job), k = 1, 2, 4 concurrent runs and 1,000 partitions x 21 records;
# --big adds 10M (the product, its window check, the audit finding nothing and 10 corrupted rows, the tamper check and
# ceiling A at 10M: issue 57's ratios); --no-peers and --no-concurrency leave those out; `make bench BENCH_ARGS="--records 100000"` for a quick one.
# --change-cost: an incremental into a 10 M-row target ÷ an empty one, a window on 1,000 ÷ 10 partitions (issue 58).
BENCH_ARGS ?= --scale --airflow --big --partitions 1000 --change-cost
bench: services
	@scripts/flink_venv.sh
	@$(ENV) python -m bench $(BENCH_ARGS)

# The soak (the soak/ package, docs/reliability.md): the demo's pipelines on `airflow standalone`, a one-minute
# schedule, producers writing and a chaos loop SIGKILLing the services for SOAK_MINUTES, then the oracle's checks.
# Not part of `make test`. `make soak SOAK_MINUTES=5` for a short one; SOAK_ARGS for the rest (--per-minute, --seed).
SOAK_MINUTES ?= 30
soak: services
	@$(ENV) python -m soak --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# The adversary (tests/adversary/, docs/reliability.md): generated pipelines, records, cuts and replays through
# Kafka, Spark and PostgreSQL, checked after every step against an oracle that imports nothing of the product,
# for FUZZ_MINUTES from FUZZ_SEED; a failure is shrunk into tests/adversary/cases/, the report goes to .state/fuzz/.
FUZZ_MINUTES ?= 30
FUZZ_SEED ?= 0
fuzz: services
	@$(ENV) FUZZ_MINUTES=$(FUZZ_MINUTES) FUZZ_SEED=$(FUZZ_SEED) python -m pytest tests/adversary/fuzz.py -q -s -p no:cacheprovider

clean: stop
	rm -rf .state site
