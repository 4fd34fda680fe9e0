"""window_lead.WindowLead: the fetch window's lead grows when a look finds a partition's first answer not in
(or only just in), up to its ceiling, and comes back down to its base by a little per look answered in time."""

import pytest

from spark_apps.runtime.source.window_lead import SHRINK_S, WindowLead


def test_a_window_answered_in_time_keeps_the_base_lead():
    lead = WindowLead(0.25, 0.5)
    assert lead.note(True, 0.04) == 0.25
    assert lead.note(True, 0.18) == 0.25  # within three quarters of the lead


def test_an_unanswered_window_lengthens_the_lead_by_half_up_to_the_ceiling():
    lead = WindowLead(0.25, 0.5)
    assert lead.note(False, 0.26) == pytest.approx(0.39)  # at least what the look waited, by half
    assert lead.note(False, 0.40) == 0.5
    assert lead.note(False, 0.52) == 0.5


def test_a_first_answer_in_the_last_quarter_of_the_lead_lengthens_it_too():
    lead = WindowLead(0.25, 0.5)
    assert lead.note(True, 0.2) == pytest.approx(0.375)


def test_looks_answered_in_time_bring_the_lead_back_to_its_base_a_little_at_a_time_never_below():
    lead = WindowLead(0.25, 0.5)
    lead.note(False, 0.5)
    assert lead.s == 0.5
    assert lead.note(True, 0.05) == pytest.approx(0.5 - SHRINK_S)
    for _ in range(30):
        lead.note(True, 0.05)
    assert lead.s == 0.25


def test_a_ceiling_below_the_base_is_the_base():
    lead = WindowLead(0.25, 0.0)  # no trigger interval: its share is 0
    assert lead.note(False, 1.0) == 0.25
