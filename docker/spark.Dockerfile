# Spark standalone master/worker image for Baton's docker-compose stack.
#
# Build context: the repository root (see docker-compose.yaml), e.g.
#   docker build -f docker/spark.Dockerfile -t baton-spark:4.3.0 .
#
# Why not an official Spark image: the executors run Baton's Python code (the confluent-kafka
# source/sink in spark_apps/), so they need the *same* Python minor version (3.11, the Airflow
# image's) and the same locked Python packages as the driver side. Spark itself comes from the
# pyspark 4.3.0 wheel pinned in requirements.txt: the wheel ships the jars and bin/spark-class,
# so SPARK_HOME is simply pyspark's install directory.
#
# Only the paths named in COPY below are sent to the builder (BuildKit skips the rest of the
# context, including .venv/ and .git/).

# Java: the same Temurin 17 JRE is copied into the Airflow image (docker/airflow.Dockerfile),
# so driver and executors run one identical JVM whatever Debian release the bases use.
FROM eclipse-temurin:17.0.16_8-jre-jammy AS java

FROM python:3.11.13-slim-bookworm

ENV JAVA_HOME=/opt/java/openjdk \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONUNBUFFERED=1
ENV PATH="${JAVA_HOME}/bin:${PATH}"
COPY --from=java /opt/java/openjdk /opt/java/openjdk

# curl: compose healthchecks on the web UIs. procps: `ps`, used by Spark's helper scripts.
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl procps \
    && rm -rf /var/lib/apt/lists/* \
    && java -version

# Same uid/gid as the Airflow image's `airflow` user (50000:0): checkpoints on the shared
# baton-data volume are written by the driver (Airflow side) and by executors (here).
RUN useradd --uid 50000 --gid 0 --create-home --home-dir /home/spark --shell /bin/bash spark \
    && mkdir -p /opt/baton /opt/spark/work /data/baton \
    && chown -R 50000:0 /opt/baton /opt/spark /data/baton \
    && chmod -R g+rwX /opt/baton /opt/spark /data/baton

WORKDIR /opt/baton

# requirements.txt is the full lock (pyspark==4.3.0 included). --no-deps installs exactly the
# lock: the Spark provider in it declares pyspark-client, which the lock deliberately leaves out
# (it would overwrite pyspark 4.3.0's Python files with 4.2.0's; see constraints/overrides.txt).
COPY requirements.txt pyproject.toml /opt/baton/
RUN pip install --no-deps -r /opt/baton/requirements.txt

# The Baton package itself (baton/ and spark_apps/), editable so that the source mounted over
# /opt/baton/{baton,spark_apps} by docker-compose.yaml is what executors import.
COPY baton /opt/baton/baton
COPY spark_apps /opt/baton/spark_apps
# Spark's Python processes import the installed pyspark, not its zip copy (spark_apps.runtime.install.worker_path).
RUN pip install --no-deps -e /opt/baton \
    && python -m spark_apps.runtime.install.worker_path install \
    && chown -R 50000:0 /opt/baton

# pyspark's install dir, for python:3.11 images. The check below fails the build if it moves,
# if pyspark is not 4.3.0, or if pyspark-client sneaked in.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark
ENV PATH="${SPARK_HOME}/bin:${PATH}" \
    PYSPARK_PYTHON=python3 \
    SPARK_WORKER_DIR=/opt/spark/work \
    SPARK_NO_DAEMONIZE=1
RUN python -c "import os, pyspark; d = os.path.dirname(pyspark.__file__); assert d == os.environ['SPARK_HOME'], d; assert pyspark.__version__ == '4.3.0', pyspark.__version__" \
    && ! pip show pyspark-client >/dev/null 2>&1 \
    && python -c "import baton, spark_apps, confluent_kafka" \
    && test -x "${SPARK_HOME}/bin/spark-class"

USER 50000:0

# 7077: master RPC; 8080: master UI; 8081: worker UI. The command (master or worker) is set per
# service in docker-compose.yaml.
EXPOSE 7077 8080 8081
CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
