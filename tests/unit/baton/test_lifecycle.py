import pytest

from baton.lifecycle import TRANSITIONS, IllegalTransition, check_transition
from baton.records import SlotState as S


def test_every_state_has_a_row():
    assert set(TRANSITIONS) == set(S)


def test_happy_path():
    state = S.STOPPED
    for nxt in (S.STARTING, S.RESTORING, S.RUNNING, S.STOPPING, S.STOPPED):
        state = check_transition(state, nxt)
    assert state is S.STOPPED


def test_staying_put_is_idempotent():
    assert check_transition(S.RUNNING, S.RUNNING) is S.RUNNING


def test_illegal_move_names_both_states():
    with pytest.raises(IllegalTransition, match="from stopped to running"):
        check_transition(S.STOPPED, S.RUNNING)


def test_failed_is_left_only_by_an_explicit_start_or_stop():
    assert TRANSITIONS[S.FAILED] == {S.STARTING, S.STOPPING, S.STOPPED}
