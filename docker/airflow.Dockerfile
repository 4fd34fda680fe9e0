# Airflow image for Baton's docker-compose stack (api-server, scheduler, dag-processor,
# triggerer, init).
#
# Build context: the repository root (see docker-compose.yaml), e.g.
#   docker build -f docker/airflow.Dockerfile -t baton-airflow:3.3.2 .
#
# Only the paths named in COPY below are sent to the builder (BuildKit skips the rest of the
# context, including .venv/ and .git/).

# Spark drivers started from Airflow tasks (client mode against spark://spark-master:7077) run
# in these containers and need a JVM: the same Temurin 17 JRE as docker/spark.Dockerfile, so
# driver and executors share one JVM build regardless of the Debian release under Airflow.
FROM eclipse-temurin:17.0.16_8-jre-jammy AS java

FROM apache/airflow:3.3.2-python3.11

USER root
COPY --from=java /opt/java/openjdk /opt/java/openjdk
ENV JAVA_HOME=/opt/java/openjdk
ENV PATH="${JAVA_HOME}/bin:${PATH}"

# Mount points of the named volumes in docker-compose.yaml must exist in the image, owned by
# airflow (50000:0), so that a fresh volume is created writable for the airflow user:
#   /opt/airflow/auth - SimpleAuthManager passwords file, written by airflow-init
#   /data/baton       - Spark checkpoints/state, shared with the Spark workers (same 50000:0)
RUN java -version \
    && mkdir -p /opt/airflow/auth /data/baton \
    && chown -R airflow:0 /opt/airflow/auth /data/baton \
    && chmod -R g+rwX /opt/airflow/auth /data/baton

USER airflow

# requirements.txt is the full lock (apache-airflow==3.3.2, pyspark==4.3.0, confluent-kafka,
# ...). It is installed with --no-deps so that exactly the lock lands: the Spark provider in it
# declares pyspark-client, which the lock deliberately leaves out (it would overwrite pyspark
# 4.3.0's Python files with 4.2.0's; see constraints/overrides.txt). The base image's own extras
# (e.g. the postgres driver psycopg2, used for the metadata DB) stay as they are.
COPY --chown=airflow:0 requirements.txt pyproject.toml /opt/airflow/
RUN pip install --no-cache-dir --no-deps -r /opt/airflow/requirements.txt

# The Baton package (baton/ and spark_apps/), installed editable with its project root at
# /opt/airflow: the repo's dags/, plugins/, include/, baton/ and spark_apps/ are bind-mounted
# over /opt/airflow/<same name> by docker-compose.yaml, so the layout under /opt/airflow mirrors
# the repository and imports resolve to the mounted source.
COPY --chown=airflow:0 baton /opt/airflow/baton
COPY --chown=airflow:0 spark_apps /opt/airflow/spark_apps
RUN pip install --no-cache-dir --no-deps -e /opt/airflow
# Spark's Python processes import the installed pyspark, not its zip copy (spark_apps.runtime.install.worker_path).
RUN python -m spark_apps.runtime.install.worker_path install

# Fail the build (not the first DAG run) if the install is off.
RUN python -c "import airflow, pyspark; assert airflow.__version__ == '3.3.2', airflow.__version__; assert pyspark.__version__ == '4.3.0', pyspark.__version__" \
    && ! pip show pyspark-client >/dev/null 2>&1 \
    && python -c "import baton, spark_apps, confluent_kafka, psycopg2"

# Executors resolve `python3` on their own PATH (the Spark image's Python 3.11).
ENV PYSPARK_PYTHON=python3
