"""A local emulator of the Agentic Memory Service REST API (add to ``INSTALLED_APPS``).

Mount ``django_pydantic_agent.contrib.memory_service_emulator.urls`` at ``api/v2/memory/`` and
point a Memory Service client at ``<server>/api/v2``. The names below drive the opt-in fault
injection and the request counter; this module imports no models, so it is safe to import
before ``django.setup()``.
"""

from __future__ import annotations

from django_pydantic_agent.contrib.memory_service_emulator.faults import (
    ROUTE_NAMES,
    Fault,
    FaultInjector,
    RequestCounter,
    fault_injector,
    request_counter,
)

__all__ = [
    "ROUTE_NAMES",
    "Fault",
    "FaultInjector",
    "RequestCounter",
    "fault_injector",
    "request_counter",
]
