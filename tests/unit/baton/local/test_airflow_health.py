"""The embedded Airflow's health answer: a status report asks a few times before calling it down."""

from baton.local.airflow import Airflow

HEALTHY = {p: {"status": "healthy"} for p in ("metadatabase", "scheduler", "triggerer", "dag_processor")}


def airflow_answering(tmp_path, answers):
    replies = iter(answers)

    class Answering(Airflow):
        def health(self):
            return next(replies)

    return Answering(tmp_path, 1, "127.0.0.1:1")


def test_one_slow_answer_is_not_called_down_when_asked_again(tmp_path):
    slow_then_fine = [{}, {**HEALTHY, "triggerer": {"status": "unhealthy"}}, HEALTHY]
    assert airflow_answering(tmp_path, slow_then_fine).healthy(attempts=3, every_s=0)
    assert not airflow_answering(tmp_path, slow_then_fine).healthy()  # one probe: the first answer
    assert not airflow_answering(tmp_path, [{}, {}, {}]).healthy(attempts=3, every_s=0)
