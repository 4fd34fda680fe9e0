"""The REST client retries a run's creation through a server error without creating it twice; its waits
end when asked to."""

import json

import httpx
import pytest

from baton.airflow_api import AirflowAPIError, AirflowClient, log_line


def client_with(answers):
    """A client whose server answers POST .../dagRuns from `answers` in turn; records the run ids sent."""
    sent = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        if request.method == "POST":
            sent.append(json.loads(request.content)["dag_run_id"])
            status = answers.pop(0)
            return httpx.Response(status, json={"dag_run_id": sent[-1], "state": "queued"} if status < 300 else {})
        return httpx.Response(200, json={"dag_run_id": request.url.path.rsplit("/", 1)[1], "state": "queued"})

    client = AirflowClient("http://airflow", "u", "p")
    client._http = httpx.Client(base_url="http://airflow", transport=httpx.MockTransport(handle))
    return client, sent


def test_a_server_error_is_retried_with_the_same_run_id(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    client, sent = client_with([500, 409])  # the first attempt did create the run
    run = client.trigger("d", {"app": "a"})
    assert len(sent) == 2 and sent[0] == sent[1] and run["dag_run_id"] == sent[0]


def test_a_bad_request_is_not_retried(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    client, sent = client_with([400])
    with pytest.raises(AirflowAPIError) as err:
        client.trigger("d", {"app": "nope"})
    assert err.value.status == 400 and len(sent) == 1


def test_a_structured_log_record_reads_as_its_event_and_the_failure_it_carries():
    record = {
        "event": "Task failed with exception",
        "level": "error",
        "error_detail": [{"exc_type": "AirflowFailException", "exc_value": "blue running: slot failed"}],
    }
    assert log_line(record) == "Task failed with exception AirflowFailException: blue running: slot failed"
    assert log_line({"event": "trigger completed"}) == "trigger completed"
    assert log_line("a plain line") == "a plain line"


def test_a_wait_for_a_run_ends_when_asked_to_stop_with_the_run_as_it_stands(monkeypatch):
    """A Ctrl-C of `make demo` while Airflow runs its start: the wait returns at once, not after 10 min."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    client, _ = client_with([])
    polls = []

    def stop_after_two():
        polls.append(1)
        return len(polls) >= 2

    run = client.wait_for_run("d", "r1", timeout_s=600, should_stop=stop_after_two)
    assert run == {"dag_run_id": "r1", "state": "queued"} and len(polls) == 2
