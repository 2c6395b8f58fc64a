"""Faults injected into the emulator surface as the client's typed errors (spec §15 item 76)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from django_pydantic_agent.contrib.memory_service_emulator import (
    Fault,
    fault_injector,
    request_counter,
)
from django_pydantic_agent.memory_service import (
    DRMemoryRateLimitError,
    DRMemoryServiceClient,
    DRMemoryServiceError,
    DRMemorySpace,
    DRMemoryUnavailableError,
)
from tests.memory_service.conftest import Wire
from tests.memory_service.orm import ChatMessage, ChatSession
from tests.support.emulator import no_faults_armed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean_faults() -> Iterator[None]:
    with no_faults_armed():
        yield


async def test_quota_window_429_carries_retry_after(wire: Wire) -> None:
    client = wire.client()
    with fault_injector.inject(Fault.rate_limited(retry_after=30, times=1)):
        with pytest.raises(DRMemoryRateLimitError) as caught:
            await DRMemorySpace.post(client)
        space = await DRMemorySpace.post(client)  # the window reopened
    assert caught.value.status_code == 429
    assert caught.value.retry_after == 30
    assert space.id


async def test_http_date_retry_after(wire: Wire) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    with (
        fault_injector.inject(Fault.rate_limited(retry_after=when)),
        pytest.raises(DRMemoryRateLimitError) as caught,
    ):
        await DRMemorySpace.list(wire.client())
    assert caught.value.retry_after is not None
    assert 85 <= caught.value.retry_after <= 91


async def test_storage_cap_429_has_no_retry_after(wire: Wire) -> None:
    space = await DRMemorySpace.post(wire.client())
    session = await ChatSession.post(space, tenant="t", topic="x", chat_id="c")
    with fault_injector.inject(Fault.rate_limited(methods=["POST"], routes=["event-list"])):
        with pytest.raises(DRMemoryRateLimitError) as caught:
            await ChatMessage.post(session, content="x", emitter_type="agent")
        assert await ChatMessage.list(session) == []  # reads still pass
    assert caught.value.retry_after is None
    assert "waiting will not help" in str(caught.value)


async def test_503_is_a_service_error(wire: Wire) -> None:
    with (
        fault_injector.inject(Fault.unavailable(times=1)),
        pytest.raises(DRMemoryServiceError) as caught,
    ):
        await DRMemorySpace.list(wire.client())
    assert type(caught.value) is DRMemoryServiceError
    assert caught.value.status_code == 503
    assert "injected" in caught.value.detail


async def test_dropped_connection_is_unavailable(wire: Wire) -> None:
    with (
        fault_injector.inject(Fault.dropped_connection(times=1)),
        pytest.raises(DRMemoryUnavailableError) as caught,
    ):
        await DRMemorySpace.list(wire.client())
    assert caught.value.status_code is None
    assert isinstance(caught.value.__cause__, httpx.TransportError)
    assert await DRMemorySpace.list(wire.client()) == []


async def test_latency_beyond_the_timeout_is_unavailable(wire: Wire) -> None:
    async with httpx.AsyncClient(timeout=0.2) as pool:
        client = DRMemoryServiceClient(endpoint=wire.endpoint, api_token="t", http_client=pool)
        with (
            fault_injector.inject(Fault.latency(0.6, times=1)),
            pytest.raises(DRMemoryUnavailableError) as caught,
        ):
            await DRMemorySpace.list(client)
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)


async def test_the_client_makes_exactly_the_expected_calls(wire: Wire) -> None:
    space = await DRMemorySpace.post(wire.client(), deduplication_key="budget")
    await ChatSession.post(space, tenant="t", topic="x", chat_id="c")
    await ChatSession.post(space, tenant="t", topic="x", chat_id="c")  # adopt: POST + GET
    assert request_counter.snapshot() == {
        ("POST", "space-create"): 1,
        ("POST", "session-list"): 2,
        ("GET", "session-detail"): 1,
    }
