# Baton: `make demo` (embedded platform + live demo) and `make test` (install + all tests).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
UV     := $(BIN)/uv
UV_VERSION := 0.13.9
STAMP  := $(VENV)/.installed
# Baton's JVM operators (jvm/src: the event-time state TTL), compiled against the installed Spark.
JAR    := $(VENV)/baton-jvm.jar
JAVA_SRC := $(shell find jvm/src -name '*.java')
SPARK_READY := $(VENV)/.spark-home

.PHONY: install lint test unit demo up down status reset bench lock clean

# Re-runs only when the lock or the package metadata changed: a repeat `make` installs nothing.
install: $(STAMP) $(JAR) $(SPARK_READY)

$(STAMP): requirements.txt pyproject.toml scripts/check_prereqs.py spark_apps/runtime/install/worker_path.py
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11+ is required ($(PYTHON) not found; set PYTHON=...)" >&2; exit 2; }
	@$(PYTHON) scripts/check_prereqs.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(UV) || $(BIN)/pip install -q uv==$(UV_VERSION)
	# sync = exactly the lock: removes anything else (e.g. a stray pyspark-client). Bytecode compiled
	# now: where PYTHONDONTWRITEBYTECODE is set (as on this project's machine) no process ever caches
	# it, and every Spark worker, Airflow task and slot would compile its imports again (pyspark's
	# data source runner: 1.6 s -> 0.3 s to import; airflow.sdk 5.1 s -> 2.1 s).
	$(UV) pip sync -q --compile-bytecode --python $(BIN)/python requirements.txt
	$(UV) pip install -q --compile-bytecode --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q baton spark_apps plugins dags >/dev/null
	@# Spark's Python processes import the installed pyspark, not the zip copy (spark_apps.runtime.install.worker_path).
	$(BIN)/python -m spark_apps.runtime.install.worker_path install >/dev/null
	@touch $(STAMP)

$(JAR): $(JAVA_SRC) $(STAMP)
	@rm -rf $(VENV)/jvm-classes && mkdir -p $(VENV)/jvm-classes
	javac -nowarn --release 17 -cp "$$($(BIN)/python -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')/*" \
		-d $(VENV)/jvm-classes $(JAVA_SRC)
	jar --create --file $@ -C $(VENV)/jvm-classes .

# The local drivers' Spark home (no Spark ML; Baton's jar linked in), then the driver's class-data-sharing
# archive for its classpath (slots start seconds sooner; both optional, see the modules).
$(SPARK_READY): $(STAMP) $(JAR) spark_apps/runtime/install/spark_home.py
	$(BIN)/python -m spark_apps.runtime.install.spark_home build
	$(BIN)/python -m spark_apps.runtime.install.cds build
	@touch $@

# The browser tests' Chromium (Debian's package; scripts/ensure_chromium.sh), once.
BROWSER := $(VENV)/.chromium

$(BROWSER): scripts/ensure_chromium.sh
	@bash scripts/ensure_chromium.sh
	@touch $@

# Lint and types (configured in pyproject.toml): ruff's rules, ruff's format and mypy; any finding fails.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Lint first, then the unit tests (stopping at the first failure), then the integration and the e2e
# tests side by side (scripts/test_streams.py says why).
test: install $(BROWSER) lint
	$(BIN)/python -m pytest tests/unit -x -q
	$(BIN)/python scripts/test_streams.py

unit: install
	$(BIN)/python -m pytest tests/unit

demo: install
	$(BIN)/python -m baton.local demo

up: install
	$(BIN)/python -m baton.local up

down:
	$(BIN)/python -m baton.local down

status:
	$(BIN)/python -m baton.local status

# Start over: stop the platform and delete its data under the state dir (it says what).
reset:
	$(BIN)/python -m baton.local reset

# Benchmarks, each on its own broker, results as JSON + PNG in bench/results/: the Kafka source's
# read rate, the click-count app's throughput and latency at the seed's 20,085 events/s with its
# standby beside it (about 5 min), the highest rate it holds so (input stepped up +5k/s a minute),
# what one tail reader's fetches cost the broker as its topic grows (7 min, no Spark),
# restart to first batch with 100k and 1M keys of state, the windowed app's state, the state-TTL
# app's state and latency under key churn against the app without TTL (2 x 10 min), a cutover, a corrected-output cutover and a rolling upgrade v1 -> v2 under
# that load, and a standby killed and restarted beside the active (about 7 min), each run by its
# steps directly (component benchmarks); the failover through the
# platform itself (handoff.py --kind failover runs bench/dag_failover.py: 5 kill -9s of the active
# and a 10 s SIGSTOP, the standby taking over by its lease watch, baton_health restarting the dead
# slot; about 35 min); then the product path: the embedded platform with Airflow, the app started
# and each handoff DAG triggered through the REST API with the form's defaults under that load
# (rolling upgrade with steady and with bursty input, cutover, reprocess; a DAG run is given 30
# min); the Baton page's data with 20 apps registered (about 3 min); last an hour through the
# platform at the seed's rate with a cutover every 10 min and a rolling upgrade every 20 (about 70
# min). About 250 min in all on a quiet machine.
# Run on a quiet machine: other load skews every figure.
bench: install
	$(BIN)/python bench/source_read.py --records 2000000
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/max_rate.py
	$(BIN)/python bench/broker_fetch_cost.py
	$(BIN)/python bench/restart.py
	$(BIN)/python bench/window_state.py
	$(BIN)/python bench/ttl_state.py
	$(BIN)/python bench/handoff.py --kind cutover
	$(BIN)/python bench/handoff.py --kind corrected_cutover
	$(BIN)/python bench/handoff.py --kind failover
	$(BIN)/python bench/handoff.py --kind rolling_upgrade
	$(BIN)/python bench/handoff.py --kind standby_restart
	$(BIN)/python bench/dag_handoff.py --kind rolling_upgrade
	$(BIN)/python bench/dag_handoff.py --kind rolling_upgrade_bursty
	$(BIN)/python bench/dag_handoff.py --kind cutover
	$(BIN)/python bench/dag_handoff.py --kind reprocess
	$(BIN)/python bench/status_page.py --seconds 120
	$(BIN)/python bench/soak.py

# Re-resolve requirements.in into the lock (needs the registry).
lock: install
	$(UV) pip compile -q requirements.in --python-version 3.11 --no-header -o requirements.txt

clean:
	rm -rf $(VENV) .state
