"""Baton as an Airflow provider: what `pip install` of the `baton` package gives an Airflow 3
deployment, found through the `apache_airflow_provider` entry point (pyproject.toml).

Connection fields are declared here (`conn-fields`, `ui-field-behaviour`), Airflow's way since 3.2:
its providers manager reads them without importing the hooks. The hooks' get_ui_field_behaviour
returns the same declaration for older Airflows, so there is one definition.

Kept free of imports beyond the standard library: every Airflow process loads this at start.
"""

from __future__ import annotations

from typing import Any

PACKAGE = "baton"
KAFKA_CONN_TYPE = "baton_kafka"
SPARK_CONN_TYPE = "baton_spark"

_KAFKA_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port"],
    "relabeling": {"host": "Bootstrap servers", "login": "SASL username", "password": "SASL password"},
    "placeholders": {
        "host": "kafka-1:9092,kafka-2:9092",
        "login": "(SASL only)",
        "extra": '{"client.id": "baton-airflow"}',
    },
}
# The Kafka form's own fields, stored in the connection's extra under these names (librdkafka's, with
# "_" for "."): baton_airflow.hooks.kafka builds the cluster's KafkaSecurity from them.
_KAFKA_FIELDS = {
    "security_protocol": {
        "label": "Security protocol",
        "schema": {"type": ["string", "null"], "enum": ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", None]},
    },
    "sasl_mechanism": {
        "label": "SASL mechanism",
        "schema": {
            "type": ["string", "null"],
            "enum": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", None],
        },
    },
    "ssl_ca_location": {"label": "CA certificate (path)", "schema": {"type": ["string", "null"]}},
    "ssl_certificate_location": {"label": "Client certificate (path)", "schema": {"type": ["string", "null"]}},
    "ssl_key_location": {"label": "Client key (path)", "schema": {"type": ["string", "null"]}},
    "ssl_key_password": {"label": "Client key password", "schema": {"type": ["string", "null"], "format": "password"}},
}
KAFKA_FORM_FIELDS = tuple(_KAFKA_FIELDS)
_SPARK_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "login", "password"],
    "relabeling": {"host": "Spark master host (spark://...)", "port": "Spark master port"},
    "placeholders": {
        "host": "spark://spark-master",
        "port": "7077",
        "extra": '{"master": "local[2]", "conf": {"spark.driver.memory": "2g"}}',
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE,
        "name": "Baton",
        "description": "Keeps stateful PySpark Structured Streaming apps on Kafka available: hot standby, exact "
        "cutover, rolling upgrades, failover and reprocessing, orchestrated by Airflow.",
        # No external-doc-url (optional in the schema): Baton's documentation is its repository's
        # README.md and docs/, not a published site, and a relative path is not a URL.
        "integrations": [{"integration-name": "Baton", "tags": ["software"]}],
        # Every module of each package (tests/unit/plugins/test_provider_info.py checks it).
        "operators": [
            {
                "integration-name": "Baton",
                "python-modules": [
                    "baton_airflow.operators.generations",
                    "baton_airflow.operators.handoff",
                    "baton_airflow.operators.health",
                    "baton_airflow.operators.reprocess",
                    "baton_airflow.operators.slots",
                    "baton_airflow.operators.steps",
                    "baton_airflow.operators.topics",
                    "baton_airflow.operators.upgrade",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Baton",
                "python-modules": ["baton_airflow.sensors.slot", "baton_airflow.sensors.slot_changes"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Baton",
                "python-modules": [
                    "baton_airflow.hooks.control",
                    "baton_airflow.hooks.kafka",
                    "baton_airflow.hooks.slot_state",
                    "baton_airflow.hooks.spark",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Baton",
                "python-modules": [
                    "baton_airflow.triggers.base",
                    "baton_airflow.triggers.cutover",
                    "baton_airflow.triggers.slot_changes",
                    "baton_airflow.triggers.status",
                    "baton_airflow.triggers.upgrade",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": KAFKA_CONN_TYPE,
                "hook-class-name": "baton_airflow.hooks.kafka.BatonKafkaHook",
                "hook-name": "Baton Kafka",
                "ui-field-behaviour": _KAFKA_BEHAVIOUR,
                "conn-fields": _KAFKA_FIELDS,
            },
            {
                "connection-type": SPARK_CONN_TYPE,
                "hook-class-name": "baton_airflow.hooks.spark.BatonSparkHook",
                "hook-name": "Baton Spark",
                "ui-field-behaviour": _SPARK_BEHAVIOUR,
            },
        ],
    }


def ui_field_behaviour(conn_type: str) -> dict[str, Any]:
    """The declared behaviour of `conn_type`'s form, in the hooks' (pre-3.2) get_ui_field_behaviour form."""
    behaviour = {KAFKA_CONN_TYPE: _KAFKA_BEHAVIOUR, SPARK_CONN_TYPE: _SPARK_BEHAVIOUR}[conn_type]
    return {
        "hidden_fields": list(behaviour["hidden-fields"]),
        "relabeling": dict(behaviour["relabeling"]),
        "placeholders": dict(behaviour["placeholders"]),
    }
