"""App definitions are validated on load; a bad one names the file, the field and the problem."""

import pytest

from baton.apps import APPS_DIR, AppDefinitionError, load_definition, load_registry

GOOD = """name: demo
module: spark_apps.apps.click_counts
version: v1
input: {topic: clicks, partitions: 4}
output: {topic: user_counts, partitions: 4}
"""


def write(tmp_path, text, name="demo"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def test_shipped_definitions_load():
    apps = load_registry(APPS_DIR)
    assert apps["click_counts"].input.topic == "clicks"
    assert apps["click_counts"].dead_letter_topic == "baton.click_counts.deadletter"


def test_defaults_and_topics(tmp_path):
    app = load_definition(write(tmp_path, GOOD))
    assert app.trigger_ms == 1000
    assert [t.name for t in app.topics()] == ["clicks", "user_counts", "baton.demo.deadletter", "baton.demo.commits"]


@pytest.mark.parametrize("text, field, problem", [
    (GOOD.replace("partitions: 4}\noutput", "partitions: 0}\noutput"), "input.partitions", "must be > 0"),
    (GOOD.replace("partitions: 4}\noutput", "partitions: four}\noutput"), "input.partitions", "must be int"),
    (GOOD.replace("version: v1\n", ""), "version", "is required"),
    (GOOD + "trigger_ms: true\n", "trigger_ms", "must be int"),
    (GOOD + "colour: blue\n", "colour", "is not a known field"),
    (GOOD.replace("user_counts", "clicks"), "output.topic", "must differ"),
    (GOOD.replace("topic: clicks", "topic: 'bad topic'"), "input.topic", "not a valid Kafka topic"),
    (GOOD.replace("name: demo", "name: other"), "name", "must match the file name"),
    ("name: [unclosed", "(file)", "not valid YAML"),
])
def test_bad_definitions_name_file_field_and_problem(tmp_path, text, field, problem):
    path = write(tmp_path, text)
    with pytest.raises(AppDefinitionError) as err:
        load_definition(path)
    assert err.value.field == field
    assert problem in err.value.problem
    assert str(path) in str(err.value)


def test_one_bad_file_fails_the_whole_registry(tmp_path):
    write(tmp_path, GOOD)
    write(tmp_path, "name: broken\n", name="broken")
    with pytest.raises(AppDefinitionError, match="broken.yaml"):
        load_registry(tmp_path)
