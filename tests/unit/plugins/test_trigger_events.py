"""How a deferred task ends on its trigger's event (met_or_raise): every gate and the cutover share it."""

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from baton_airflow.triggers.base import met_or_raise


class TaskInstance:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_met_returns_the_message_and_pushes_no_reason():
    ti = TaskInstance()
    assert met_or_raise({"ti": ti}, {"status": "met", "message": "cut over"}) == "cut over"
    assert ti.pushed == {}


@pytest.mark.parametrize("status, error", [("failed", AirflowFailException), ("timeout", AirflowException)])
def test_a_failed_gate_fails_for_good_and_a_timeout_for_a_retry_both_with_the_reason(status, error):
    ti = TaskInstance()
    with pytest.raises(error, match="past the fence") as raised:
        met_or_raise({"ti": ti}, {"status": status, "message": "the active emitted past the fence"})
    assert (status == "failed") == isinstance(raised.value, AirflowFailException)
    assert ti.pushed == {"reason": "the active emitted past the fence"}


def test_a_failure_says_what_did_not_happen_and_where_to_look():
    ti = TaskInstance()
    with pytest.raises(AirflowFailException, match="^v2 did not start: slot failed; driver log: /x.log$"):
        met_or_raise(
            {"ti": ti},
            {"status": "failed", "message": "slot failed"},
            lead="v2 did not start",
            detail="driver log: /x.log",
        )
    assert ti.pushed == {"reason": "v2 did not start: slot failed"}
