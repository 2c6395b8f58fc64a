"""The conversation a run serves: its owner, its thread and the id the model's run carries.

The run endpoint's inner agent sets it (``enter_run_scope``) on the task that runs the agent,
from the request's owner and the thread, so a capability that reads stored history
(``StoredHistorySource``) knows whose history it may read, taking nothing from the client.
The conversation id given to pydantic-ai is derived from the owner and the thread
(``conversation_id_for``): two owners' threads of the same name never share one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

__all__ = ["RunScope", "conversation_id_for", "current_run_scope", "enter_run_scope", "run_scope"]

_NAMESPACE: Final = uuid.UUID("5b0c3e55-2f6b-4c7e-9a55-6e1a1f3d2c70")

_CURRENT: ContextVar[RunScope | None] = ContextVar("django_pydantic_agent_run_scope", default=None)


@dataclass(frozen=True, kw_only=True)
class RunScope:
    """The owner and thread of the run the current task serves."""

    owner_id: str
    thread_id: str

    @property
    def conversation_id(self) -> str:
        """The conversation id of the thread (``conversation_id_for``)."""
        return conversation_id_for(self.owner_id, self.thread_id)


def conversation_id_for(owner_id: str, thread_id: str) -> str:
    """The pydantic-ai conversation id of an owner's thread: a UUID derived from both."""
    return str(uuid.uuid5(_NAMESPACE, f"{owner_id}\x00{thread_id}"))


def current_run_scope() -> RunScope | None:
    """The run the current task serves, or ``None`` outside a run."""
    return _CURRENT.get()


@contextmanager
def run_scope(owner_id: str, thread_id: str) -> Iterator[RunScope]:
    """Make ``(owner_id, thread_id)`` the current run's scope inside the block (and in the
    tasks started in it, which copy the context)."""
    scope = RunScope(owner_id=owner_id, thread_id=thread_id)
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)


def enter_run_scope(scope: RunScope) -> None:
    """Make ``scope`` the current task's run scope until the task ends (a run's producer task
    runs in a context of its own, so nothing outlives it)."""
    _CURRENT.set(scope)
