"""The embedded broker starts, serves the Kafka protocol, and creates topics idempotently."""

import pytest

from baton.kafka.admin import TopicMismatch, TopicSpec, ensure_topics

pytestmark = pytest.mark.integration


def test_ensure_topics_is_idempotent(bootstrap, topics):
    names = topics(a=3)
    assert ensure_topics(bootstrap, [TopicSpec(names["a"], 3)]) == []


def test_partition_mismatch_is_an_error(bootstrap, topics):
    names = topics(a=2)
    with pytest.raises(TopicMismatch, match="has 2 partitions, expected 4"):
        ensure_topics(bootstrap, [TopicSpec(names["a"], 4)])


def test_broker_stop_leaves_no_process(tmp_path):
    from baton.local.broker import Broker
    from baton.local.procs import free_port, pid_alive

    b = Broker(state_dir=tmp_path, port=free_port())
    b.start()
    pid = b.proc.pid()
    assert pid is not None and b.healthy()
    assert b.stop()
    assert not pid_alive(pid)
    assert not b.healthy()
