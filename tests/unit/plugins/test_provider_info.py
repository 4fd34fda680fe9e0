"""Baton's provider metadata: valid against the schema Airflow checks it with at runtime (an invalid
one would break every Airflow process's provider discovery), named as the package is, complete (every
module of its hooks, operators, sensors and triggers), and the connection types it declares match their
hooks."""

import importlib
import json
from pathlib import Path

import airflow
import jsonschema

from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.hooks.spark import BatonSparkHook
from baton_airflow.provider_info import get_provider_info, ui_field_behaviour

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"
PACKAGE_DIR = Path(__file__).resolve().parents[3] / "plugins" / "baton_airflow"


def test_the_provider_info_is_valid_for_airflow_and_named_as_the_package():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "baton" and 'name = "baton"' in PYPROJECT.read_text()
    assert 'provider_info = "baton_airflow.provider_info:get_provider_info"' in PYPROJECT.read_text()


def test_every_declared_module_imports_and_each_connection_type_is_its_hooks():
    info = get_provider_info()
    for section in ("operators", "sensors", "hooks", "triggers"):
        for group in info[section]:
            for module in group["python-modules"]:
                importlib.import_module(module)
    declared = {c["connection-type"]: c["hook-class-name"] for c in info["connection-types"]}
    assert declared == {
        "baton_kafka": "baton_airflow.hooks.kafka.BatonKafkaHook",
        "baton_spark": "baton_airflow.hooks.spark.BatonSparkHook",
    }
    assert (BatonKafkaHook.conn_type, BatonSparkHook.conn_type) == ("baton_kafka", "baton_spark")


def test_every_module_of_the_hooks_operators_sensors_and_triggers_is_declared():
    info = get_provider_info()
    for section in ("operators", "sensors", "hooks", "triggers"):
        modules = sorted(
            f"baton_airflow.{section}.{p.stem}" for p in (PACKAGE_DIR / section).glob("*.py") if p.stem != "__init__"
        )
        assert len(modules) >= 2, section  # the walk found the package
        declared = sorted(m for group in info[section] for m in group["python-modules"])
        assert declared == modules, section


def test_no_placeholder_url_is_declared():
    assert "example.invalid" not in json.dumps(get_provider_info())


def test_the_hooks_form_behaviour_is_the_declared_one():
    kafka = BatonKafkaHook.get_ui_field_behaviour()
    assert kafka == ui_field_behaviour("baton_kafka")
    assert kafka["relabeling"] == {"host": "Bootstrap servers", "login": "SASL username", "password": "SASL password"}
    assert "password" not in kafka["hidden_fields"] and "port" in kafka["hidden_fields"]
    assert BatonSparkHook.get_ui_field_behaviour()["placeholders"]["port"] == "7077"
