"""Fault injection and the request counter, over real HTTP against the live server."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from django_pydantic_agent.contrib.memory_service_emulator import (
    ROUTE_NAMES,
    Fault,
    FaultInjector,
    fault_injector,
    request_counter,
)

HEADERS = {
    "Authorization": "Bearer live-token",
    "Content-Type": "application/json",
    "Accept": "application/json",
}


@pytest.fixture
def http(live_server: Any, transactional_db: None) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{live_server.url}/api/v2/memory/", headers=HEADERS, timeout=10
    ) as client:
        yield client


# ----------------------------------------------------------------------------- the API


def test_fault_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        Fault.unavailable(rate=1.5)
    with pytest.raises(ValueError, match="at least 1"):
        Fault.unavailable(times=0)
    with pytest.raises(ValueError, match="negative"):
        Fault.latency(-1)
    with pytest.raises(ValueError, match="Unknown emulator route"):
        Fault.dropped_connection(routes=["spaces"])


def test_scoping_by_method_route_and_times() -> None:
    injector = FaultInjector()
    limited = injector.add(
        Fault.rate_limited(retry_after=5, times=2, methods=["post"], routes=["event-list"])
    )
    assert limited.retry_after == "5"
    assert injector.pick("GET", "event-list") == (0.0, None)
    assert injector.pick("POST", "session-list") == (0.0, None)
    assert injector.pick("POST", "event-list") == (0.0, limited)
    assert injector.pick("POST", "event-list") == (0.0, limited)
    assert injector.pick("POST", "event-list") == (0.0, None)
    assert injector.fired("rate_limit") == 2
    injector.remove(limited)
    injector.clear()
    assert injector.fired() == 0


def test_latency_adds_up_and_one_outcome_wins() -> None:
    injector = FaultInjector()
    slow = Fault.latency(0.25)
    first = Fault.unavailable()
    second = Fault.dropped_connection()
    with injector.inject(slow, first, Fault.latency(0.5), second):
        assert injector.pick("GET", "space-list") == (0.75, first)
    assert injector.pick("GET", "space-list") == (0.0, None)
    assert injector.fired("latency") == 2
    assert injector.fired("drop") == 0


def test_rate_is_a_seeded_probability() -> None:
    injector = FaultInjector()
    injector.seed(1234)
    with injector.inject(Fault.unavailable(rate=0.3)):
        hits = sum(injector.pick("GET", "space-list")[1] is not None for _ in range(2000))
    assert 500 < hits < 700
    never = FaultInjector()
    with never.inject(Fault.unavailable(rate=0.0)):
        assert all(never.pick("GET", "space-list") == (0.0, None) for _ in range(100))


def test_injector_is_thread_safe_under_contention() -> None:
    injector = FaultInjector()
    fault = injector.add(Fault.unavailable(times=500))

    def worker() -> None:
        for _ in range(200):
            injector.pick("GET", "space-list")

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert injector.fired("unavailable") == 500
    injector.remove(fault)


def test_route_names_are_the_url_names() -> None:
    from django_pydantic_agent.contrib.memory_service_emulator import urls

    names = {pattern.name for pattern in urls.urlpatterns}
    assert names == ROUTE_NAMES


# ----------------------------------------------------------------------------- over HTTP


def test_rate_limited_with_and_without_retry_after(http: httpx.Client) -> None:
    with fault_injector.inject(Fault.rate_limited(retry_after=30, times=1)):
        quota = http.get("")
        assert http.get("").status_code == 200
    assert quota.status_code == 429
    assert quota.headers["Retry-After"] == "30"
    assert quota.headers["Content-Type"] == "application/json"
    assert "Rate limit" in quota.json()["detail"]
    date = format_datetime(dt.datetime.now(dt.UTC), usegmt=True)
    with fault_injector.inject(Fault.rate_limited(retry_after=date)):
        assert http.get("").headers["Retry-After"] == date
    with fault_injector.inject(Fault.rate_limited()):
        storage = http.post("new/", json={})
    assert storage.status_code == 429
    assert "Retry-After" not in storage.headers


def test_unavailable_changes_nothing(http: httpx.Client) -> None:
    with fault_injector.inject(Fault.unavailable(methods=["POST"])):
        response = http.post("new/", json={})
        assert http.get("").json()["total"] == 0
    assert response.status_code == 503
    assert response.json()["detail"]


def test_latency_delays_then_answers(http: httpx.Client) -> None:
    with fault_injector.inject(Fault.latency(0.3, routes=["space-list"])):
        started = time.monotonic()
        response = http.get("")
        elapsed = time.monotonic() - started
        quick_started = time.monotonic()
        http.post("new/", json={})
        quick = time.monotonic() - quick_started
    assert response.status_code == 200
    assert elapsed >= 0.3
    assert quick < 0.3


def test_dropped_connection_sends_no_response(http: httpx.Client) -> None:
    with fault_injector.inject(Fault.dropped_connection(times=1, methods=["POST"])):
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            http.post("new/", json={"description": "lost"})
        retried = http.post("new/", json={"description": "kept"})
    assert retried.status_code == 201
    listed = http.get("").json()
    assert [item["description"] for item in listed["items"]] == ["kept"]
    assert fault_injector.fired("drop") == 1


def test_counter_sees_real_requests_including_faulted_ones(http: httpx.Client) -> None:
    space_id = http.post("new/", json={}).json()["memorySpaceId"]
    sessions = f"{space_id}/sessions/"
    with fault_injector.inject(Fault.unavailable(times=1)):
        assert http.get(sessions).status_code == 503
    assert http.get(sessions).status_code == 200
    assert http.get("nowhere").status_code == 404
    assert request_counter.snapshot() == {
        ("POST", "space-create"): 1,
        ("GET", "session-list"): 2,
        ("GET", "not-found"): 1,
    }


def test_drop_after_processing_loses_only_the_answer(http: httpx.Client) -> None:
    fault = Fault.dropped_connection(after_processing=True, times=1, routes=["space-create"])
    with fault_injector.inject(fault):
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            http.post("new/", json={"deduplicationKey": "once"})
        # The write happened: a retry meets the deduplication key and can adopt the space.
        retried = http.post("new/", json={"deduplicationKey": "once"})
    assert retried.status_code == 409
    existing = retried.json()["existingMemorySpaceId"]
    assert http.get("").json()["items"][0]["memorySpaceId"] == existing


def test_timeout_holds_the_request_past_the_client_timeout(
    live_server: Any, transactional_db: None
) -> None:
    with httpx.Client(
        base_url=f"{live_server.url}/api/v2/memory/", headers=HEADERS, timeout=0.2
    ) as impatient:
        with fault_injector.inject(Fault.timeout(0.6, times=1, routes=["space-create"])):
            with pytest.raises(httpx.ReadTimeout):
                impatient.post("new/", json={"description": "lost"})
            kept = impatient.post("new/", json={"description": "kept"})
        listed = impatient.get("").json()
    assert kept.status_code == 201
    assert [item["description"] for item in listed["items"]] == ["kept"]
    assert fault_injector.fired("timeout") == 1


def test_timeout_after_processing_times_out_on_a_write_that_happened(
    live_server: Any, transactional_db: None
) -> None:
    with httpx.Client(
        base_url=f"{live_server.url}/api/v2/memory/", headers=HEADERS, timeout=0.2
    ) as impatient:
        fault = Fault.timeout(0.6, after_processing=True, times=1, routes=["space-create"])
        with fault_injector.inject(fault), pytest.raises(httpx.ReadTimeout):
            impatient.post("new/", json={"deduplicationKey": "slow"})
        retried = impatient.post("new/", json={"deduplicationKey": "slow"})
    assert retried.status_code == 409
    assert retried.json()["existingMemorySpaceId"]


def test_timeout_delay_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        Fault.timeout(-0.5)
