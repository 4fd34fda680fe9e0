"""A slot's log lines carry a time, the level, the slot's identity and where they come from: the
runtime's own from INFO, other libraries' only from WARNING."""

import logging

import pytest

from spark_apps.runtime.run import configure_logging


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {n: logging.getLogger(n).level for n in ("spark_apps", "baton")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, saved in levels.items():
        logging.getLogger(name).setLevel(saved)


def test_the_runtimes_lines_carry_the_slots_identity_and_others_only_warn(capsys, restore_logging):
    configure_logging("cc_1/blue/gen-2")
    logging.getLogger("spark_apps.runtime.harness").info("state digest (restore, batch 3): 10 rows")
    logging.getLogger("py4j.clientserver").info("chatty library line")
    logging.getLogger("py4j.clientserver").warning("a library's warning")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith(
        " INFO [cc_1/blue/gen-2] spark_apps.runtime.harness: state digest (restore, batch 3): 10 rows"
    )
    assert lines[1].endswith(" WARNING [cc_1/blue/gen-2] py4j.clientserver: a library's warning")
