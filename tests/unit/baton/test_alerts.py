"""Which findings are alerts, and when the same alert is sent again."""

from baton.alerts import Alert, alerts_of, due
from baton.health import Finding, Severity, SlotHealth, Verdict
from baton.records import Slot

HOUR_MS = 3_600_000


def health(*findings, slot=Slot.BLUE):
    return SlotHealth("app", slot, Verdict.DEAD, findings=list(findings))


def test_critical_findings_and_failed_slots_are_alerts_warnings_are_not():
    got = alerts_of(
        [
            health(
                Finding("lease", Severity.CRITICAL, "not renewed for 9 s"), Finding("batch_time", Severity.WARN, "slow")
            ),
            health(Finding("failover", Severity.INFO, "took over"), slot=Slot.GREEN),
        ],
        failed={"app/green": "crash loop: 2 restarts"},
    )
    assert [(a.slot, a.rule) for a in got] == [("blue", "lease"), ("green", "failed")]
    assert got[1].text() == "Baton: app/green failed: crash loop: 2 restarts"


def test_an_alert_is_sent_once_then_again_after_the_repeat_and_at_once_when_it_comes_back():
    a = Alert("app", "blue", "lease", "x")
    send, sent = due([a, a], {}, now_ms=0)
    assert send == [a] and sent == {a.key: 0}  # one per key a run
    send, sent = due([a], sent, now_ms=HOUR_MS - 1)
    assert send == [] and sent == {a.key: 0}
    send, sent = due([a], sent, now_ms=HOUR_MS)
    assert send == [a] and sent == {a.key: HOUR_MS}
    send, sent = due([], sent, now_ms=HOUR_MS + 60_000)
    assert send == [] and sent == {}  # it stopped holding: forgotten
    send, _ = due([a], sent, now_ms=HOUR_MS + 120_000)
    assert send == [a]
