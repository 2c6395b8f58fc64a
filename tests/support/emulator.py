"""State of the Memory Service emulator that outlives one test and must be reset around it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django_pydantic_agent.contrib.memory_service_emulator import fault_injector, request_counter


@contextmanager
def no_faults_armed() -> Iterator[None]:
    """Disarm every fault and zero the request counter before and after the block."""
    fault_injector.clear()
    request_counter.reset()
    try:
        yield
    finally:
        fault_injector.clear()
        request_counter.reset()
