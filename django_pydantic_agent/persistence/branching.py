"""Optional store capabilities for threads as trees: branches and forks.

A conversation's messages form a tree (a branch starts where a user message is edited or an
answer regenerated); ``load`` returns the active branch only. A store that keeps the other
branches says so with these ``runtime_checkable`` protocols, read through one helper each that
knows the default (the ``persistence.base`` habit):

- ``KeepsBranches``: ``branch_points(thread_id, request=...)``, the active messages that have
  siblings (``BranchPoint``), and ``activate(thread_id, message_id, request=...)``, which makes
  the branch through a message the active one. Read with ``branch_points`` and
  ``activate_branch``.
- ``ForksThreads``: ``fork(thread_id, message_id, request=...)`` copies the active branch up to
  and including a message into a new thread of the same owner. Without it, ``fork_into``
  (and ``fork_thread``) loads the thread and saves the copy through the store's own ``load``
  and ``save``.

The branch rules themselves (``BranchPoint``, the path a switch makes active, what a fork
keeps) are ``chat_history.tree``'s.

Owner scoping is the store's, as everywhere: another owner's thread reads as missing.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.chat_history.tree import BranchPoint, fork_end
from django_pydantic_agent.persistence.base import Conversation
from django_pydantic_agent.persistence.derive import fork_title
from django_pydantic_agent.persistence.wire import strip_branches

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = [
    "BranchPoint",
    "ForksThreads",
    "KeepsBranches",
    "activate_branch",
    "branch_points",
    "fork_into",
    "fork_thread",
    "new_thread_id",
]


@runtime_checkable
class KeepsBranches(Protocol):
    """Optional: a store that keeps every branch of a thread, not only the active one."""

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The active messages with siblings, by AG-UI id; ``None`` for a missing thread."""
        ...

    async def activate(self, thread_id: str, message_id: str, *, request: HttpRequest) -> bool:
        """Make the branch through ``message_id`` active; ``False`` when the thread (or the
        owner's thread) has no such message."""
        ...


@runtime_checkable
class ForksThreads(Protocol):
    """Optional: a store that copies a thread's active branch into a new thread itself."""

    async def fork(
        self, thread_id: str, message_id: str, new_thread_id: str, *, request: HttpRequest
    ) -> bool:
        """Copy the active branch up to and including ``message_id`` into ``new_thread_id``;
        ``False`` (nothing written) when the owner's thread has no such active message."""
        ...


async def branch_points(
    store: object, thread_id: str, *, request: HttpRequest
) -> dict[str, BranchPoint]:
    """The branch points of the thread's active branch, ``{}`` for a store that keeps none."""
    if implements(store, KeepsBranches):
        return await store.branch_points(thread_id, request=request) or {}
    return {}


async def activate_branch(
    store: object, thread_id: str, message_id: str, *, request: HttpRequest
) -> bool:
    """``store.activate(...)`` when the store keeps branches; otherwise whether
    ``message_id`` already is on the (only) branch ``load`` returns."""
    if implements(store, KeepsBranches):
        return await store.activate(thread_id, message_id, request=request)
    load = getattr(store, "load", None)
    if load is None:
        return False
    conversation = await load(thread_id, request=request)
    if conversation is None:
        return False
    return any(isinstance(m, dict) and m.get("id") == message_id for m in conversation.messages)


def new_thread_id() -> str:
    """A fresh thread id for a fork or an import (a uuid4, in the id alphabet)."""
    return str(uuid.uuid4())


async def fork_into(
    store: Any, thread_id: str, message_id: str, new_thread_id: str, *, request: HttpRequest
) -> bool:
    """Copy the owner's thread's active branch up to ``message_id`` into ``new_thread_id``:
    the store's own ``fork`` (``ForksThreads``), else a ``load`` and a ``save`` of what
    ``chat_history.tree.fork_end`` keeps. The new thread is titled as a fork of its source
    (``derive.fork_title``). ``False`` (nothing written) when the owner has no
    such thread or its active branch no such message."""
    if implements(store, ForksThreads):
        return bool(await store.fork(thread_id, message_id, new_thread_id, request=request))
    conversation = await store.load(thread_id, request=request)
    messages = [] if conversation is None else list(conversation.messages)
    end = fork_end(messages, message_id)
    if end is None:
        return False
    kept = strip_branches(messages[:end])  # a fork holds one branch
    title = await thread_title(store, thread_id, request=request)
    await store.save(Conversation(thread_id=new_thread_id, messages=kept), request=request)
    await store.rename(new_thread_id, fork_title(title), request=request)
    return True


async def thread_title(store: Any, thread_id: str, *, request: HttpRequest) -> str:
    """The title the owner's thread lists under (``""`` when it is not listed)."""
    for meta in await store.list(request=request):
        if meta.thread_id == thread_id:
            return str(meta.title)
    return ""


async def fork_thread(
    store: Any, thread_id: str, message_id: str, *, request: HttpRequest
) -> str | None:
    """Fork the owner's thread at ``message_id`` into a new thread (``fork_into``); its id,
    or ``None`` when the owner has no such thread or its active branch no such message."""
    new_id = new_thread_id()
    done = await fork_into(store, thread_id, message_id, new_id, request=request)
    return new_id if done else None
