"""Chat-history repositories on the Memory Service, within a request budget.

``ChatRepository`` and ``MessageRepository`` store the records of
:mod:`django_pydantic_agent.chat_history.records` exactly as the ``datarobot`` reference does
(same session and event bodies, same deduplication keys, same ``<kind>:<uuid>`` locator keys),
so each implementation reads what the other wrote. What differs is how often they ask.

Caching. A :class:`ChatSessionRegistry` holds, per chat, the live session and the message
events it has read or written, with their ``createdAt`` concurrency tokens. An update is then
one PATCH of the cached event; nothing re-lists a chat to find one event. A chat created here
is known to be empty. A cold worker asked for a chat's newest messages
(``get_recent_messages``, a run's context window) reads them with one ``lastN`` request and
keeps them (a miss on them lists the chat); asked for the whole chat, it lists it once
(pages of 100); afterwards
``get_chat_messages`` checks freshness with one ``lastN=1`` request and reads only the events
added since (a create whose sequence id shows that another writer got in first makes the next
read list the chat again). A stale token (another writer patched the event) gives HTTP 422:
the repository re-reads that event (and the ones after it), re-applies the change and patches
again, up to three times.

Batching. ``MessageRepository.transaction()`` collects the writes made inside it and sends them
at exit: per chat one batch POST (the new messages, already carrying every change made to them
inside the block) and one batch PATCH (the changed messages), at most 200 events per request.
Reads inside the block see the pending writes. An update that changes nothing costs nothing.

Locating entities without a locator per entity. The reference writes one ``EntityLocator``
session per chat, message, tool call and reasoning step; each is one more POST. Here:

- A chat's uuid is a segment of its description, ``//thread/<thread_id>/<chat_uuid>/`` (readers
  that declare only ``thread_id``, the reference included, ignore the extra segment), so a cold
  replica finds it with one description-filter request.
- Every uuid minted here for a message, tool call or reasoning step carries the first half of
  its chat's uuid (RFC 9562 version 8 layout; a chat uuid's second half is a hash of its first,
  so the chat uuid is recovered exactly). A cold replica resolves any of them by finding the
  chat (one request) and listing it once, which also warms every other lookup in that chat.
- Reference-written data (uuid4 ids) is still found through its ``chat:``, ``message:``,
  ``tool_call:`` and ``reasoning:`` locators, and messages this package appends to a
  reference-created chat get a reference-style locator, so reference replicas can find them.

Consistency trade-off. The event or session written is the source of truth; locators are
best-effort (a failed write is logged and swallowed). The freshness check sees events appended
by other writers and changes to the newest event, not a patch of an older event by another
worker; such a stale copy is corrected by the version-conflict path on the next write, or by a
fresh repository. Caches are per process; there is no cross-replica read-after-write guarantee
for a write racing a read. A reference replica cannot resolve a chat created here by its
``chat_uuid`` (it finds it by thread, as its storage agent does). ``delete_chat`` soft-deletes
the session and its events in one request and leaves any locators as orphans: they point at a
dead session and read as "not found".

Failures. A 429 (honouring ``Retry-After``), a 502/503/504 and a request without a response are
retried with backoff (:class:`RetryPolicy`: bounded attempts and total time). Event creates are
not idempotent on the service, so after a failure that may have been carried out the newest
events are checked for the message uuids before posting again: a message is never lost or
stored twice.

Branches (``StartsBranches``). A chat's tree is a log: each message follows the active branch's
tip when it was written, and branch marker events (body version 0, which readers of version 1
skip) cut the active branch at a record or activate the branch through one. Reads fold the
events into the active branch; a chat without markers is one branch and reads as before.

Size limit. The service refuses event content over 100 000 characters. A longer message keeps
its first 100 000 characters and is marked ``errored`` with an error saying so (never a
silent freeze or duplicated text); later deltas to it are dropped.
"""

from __future__ import annotations

from django_pydantic_agent.chat_history.memory_service._retry import RetryPolicy
from django_pydantic_agent.chat_history.memory_service.chats import ChatRepository
from django_pydantic_agent.chat_history.memory_service.messages import (
    MAX_CONTENT_LENGTH,
    MessageRepository,
)
from django_pydantic_agent.chat_history.memory_service.registry import (
    ChatSessionRegistry,
    EntityLocator,
    LocatorIndex,
)

__all__ = [
    "MAX_CONTENT_LENGTH",
    "ChatRepository",
    "ChatSessionRegistry",
    "EntityLocator",
    "LocatorIndex",
    "MessageRepository",
    "RetryPolicy",
]
