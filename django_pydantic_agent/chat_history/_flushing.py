"""Flushing a run's tracked records: one transaction per flush, confirmed only on success.

The first write of a record creates it with its content and status; later writes send only
what changed, text as an idempotent ``<field>_delta`` at the confirmed stored length. After a
failed flush, the next one re-reads what the store really holds for this run's records
(``recover``), so a write that landed although its answer was lost is neither lost nor
duplicated. A write that can never succeed because the run's thread was deleted
(``ChatNotFoundError``, or a record gone from a chat that is gone) is not retried: the run
stores nothing more and says so in one INFO line (:func:`thread_gone`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from django_pydantic_agent.chat_history.errors import (
    ChatNotFoundError,
    RunFencedError,
    StaleDeltaError,
)
from django_pydantic_agent.chat_history.records import (
    MessageReasoningUpdate,
    MessageToolCallUpdate,
    MessageUpdate,
)
from django_pydantic_agent.chat_history.repositories import MessageRepositoryLike
from django_pydantic_agent.chat_history.tracking import (
    StorageState,
    TrackedMessage,
    TrackedReasoning,
    TrackedRecord,
    TrackedToolCall,
)

__all__ = ["Flusher", "is_transient", "thread_gone"]

logger = logging.getLogger("django_pydantic_agent.chat_history")


#: HTTP statuses of a busy, rate-limited or unreachable backend (errors that carry ``status_code``).
_TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure retrying answers: a timeout, a lost connection, a busy backend.

    Those are logged as one line; anything else keeps its traceback. A ``StaleDeltaError`` (the
    store holds less than this run wrote, e.g. a cached copy another request refreshed) is one
    too: the next flush re-reads the record and resends the full value. An error with a
    ``status_code`` of ``None`` (the Memory Service client's "no response") counts as lost.
    """
    if isinstance(exc, TimeoutError | ConnectionError | StaleDeltaError):
        return True
    if not hasattr(exc, "status_code"):
        return False
    status = exc.status_code
    return status is None or status in _TRANSIENT_STATUSES


def thread_gone(state: StorageState) -> bool:
    """Mark the run's thread as deleted under it: nothing more is written, nothing retried.

    Logs one INFO line per run (no traceback: nothing failed that a retry could fix). Returns
    ``True``, a flush's answer when there is nothing left to retry.
    """
    if not state.gone:
        state.gone = True
        logger.info(
            "Thread %r was deleted while run %r wrote to it; the run goes on, and the rest of "
            "it is not stored.",
            state.thread_id,
            state.run_id,
        )
    state.flush_now = False
    state.flush_due = None
    state.needs_recovery = False
    return True


class Flusher:
    """Writes the pending changes of a run's records through a ``MessageRepositoryLike``.

    ``chat_gone`` (optional) answers whether the run's chat was deleted; it is asked only when
    a write failed without a ``ChatNotFoundError``, or found a record missing.
    """

    def __init__(
        self,
        repo: MessageRepositoryLike,
        *,
        retry_after: float,
        chat_gone: Callable[[StorageState], Awaitable[bool]] | None = None,
    ) -> None:
        self.repo = repo
        self.retry_after = retry_after
        self.chat_gone = chat_gone
        #: Whether the last failed ``flush`` failed with a transient error (``is_transient``).
        self.transient_failure = False
        self._missing: list[TrackedRecord] = []

    async def _is_gone(self, state: StorageState) -> bool:
        if self.chat_gone is None:
            return False
        try:
            return await self.chat_gone(state)
        except Exception:  # the store is failing: the flush's own error is what gets logged
            return False

    async def flush(self, state: StorageState) -> bool:
        """Write every pending change in one transaction; confirm it locally only on success.

        ``False`` means the changes are kept for a retry; ``True`` that they are stored, or
        that the thread was deleted (``state.gone``) and they never will be.
        """
        state.flush_now = False
        if state.gone or not state.dirty():
            state.flush_due = None
            return True
        commits: list[Callable[[], None]] = []
        retrying = state.needs_recovery  # an earlier flush failed
        try:
            if state.needs_recovery:
                await self.recover(state)
            async with self.repo.transaction():
                for message in state.messages:
                    await self._write_message(state, message, commits)
                for call in state.foreign:
                    await self._write_tool_call(call, call.message_uuid, commits)
        except ChatNotFoundError:
            return thread_gone(state)
        except RunFencedError:
            raise  # another worker runs it on: stop, retry nothing
        except Exception as exc:
            expected = is_transient(exc)
            self.transient_failure = expected
            if not expected and await self._is_gone(state):
                return thread_gone(state)
            # An outage fails every flush until it ends: its first failure is logged, the
            # others only at DEBUG (a run retries every flush interval).
            logger.log(
                logging.DEBUG if expected and retrying else logging.WARNING,
                "Persisting run %r failed; the changes are kept and retried.%s",
                state.run_id,
                f" ({type(exc).__name__}: {exc})" if expected else "",
                exc_info=not expected,
            )
            state.needs_recovery = True
            state.flush_due = asyncio.get_running_loop().time() + self.retry_after
            return False
        for commit in commits:
            commit()
        if retrying:
            logger.info("Persisting run %r works again; nothing was lost.", state.run_id)
        state.needs_recovery = False
        state.flush_due = None
        if self._missing:
            if await self._is_gone(state):
                return thread_gone(state)
            for record in self._missing:
                logger.warning(
                    "A record of this run (%s) is no longer in the store; its later changes "
                    "are dropped.",
                    record.uuid,
                )
        return True

    @staticmethod
    def _confirmer(
        record: TrackedRecord, uuid: UUID, sent_len: int, status: str, sent: dict[str, Any]
    ) -> Callable[[], None]:
        return lambda: record.confirm(uuid, sent_len, status, sent)

    async def _write_message(
        self,
        state: StorageState,
        message: TrackedMessage,
        commits: list[Callable[[], None]],
    ) -> None:
        uuid = message.uuid
        if message.lost:
            return
        sent = dict(message.changes)
        sent_len = len(message.text.value)
        if uuid is None:
            update: dict[str, Any] = {
                "content": message.text.value,
                **message.status_fields(),
                **sent,
            }
            update["chat_uuid"] = message.dto.chat_uuid or state.chat.chat_uuid
            created = await self.repo.create_message(message.dto.model_copy(update=update))
            uuid = created.message_uuid
            commits.append(self._confirmer(message, uuid, sent_len, message.status, sent))
        elif message.dirty:
            fields = {**message.text.write_fields("content"), **sent}
            if message.status != message.stored_status:
                fields.update(message.status_fields())
            result = await self.repo.update_message(uuid, MessageUpdate(**fields))
            if result is None:
                self._lost(message)
                return
            commits.append(self._confirmer(message, uuid, sent_len, message.status, sent))
        for step in message.reasonings:
            await self._write_reasoning(step, uuid, commits)
        for call in message.tool_calls:
            await self._write_tool_call(call, uuid, commits)

    async def _write_tool_call(
        self, call: TrackedToolCall, parent: UUID | None, commits: list[Callable[[], None]]
    ) -> None:
        if call.lost or not call.dirty or parent is None:
            return
        sent = dict(call.changes)
        sent_len = len(call.text.value)
        if call.uuid is None:
            update = {
                "message_uuid": parent,
                "arguments": call.text.value,
                **call.status_fields(),
                **sent,
            }
            created = await self.repo.create_message_tool_call(call.dto.model_copy(update=update))
            commits.append(self._confirmer(call, created.uuid, sent_len, call.status, sent))
            return
        fields = {**call.text.write_fields("arguments"), **sent}
        if call.status != call.stored_status:
            fields.update(call.status_fields())
        result = await self.repo.update_message_tool_call(
            call.uuid, MessageToolCallUpdate(**fields)
        )
        if result is None:
            self._lost(call)
            return
        commits.append(self._confirmer(call, call.uuid, sent_len, call.status, sent))

    async def _write_reasoning(
        self, step: TrackedReasoning, parent: UUID, commits: list[Callable[[], None]]
    ) -> None:
        if step.lost or not step.dirty:
            return
        sent = dict(step.changes)
        sent_len = len(step.text.value)
        if step.uuid is None:
            update = {
                "message_uuid": parent,
                "content": step.text.value,
                **step.status_fields(),
                **sent,
            }
            if step.agui_id is not None:
                update["agui_id"] = step.agui_id
            created = await self.repo.create_message_reasoning(step.dto.model_copy(update=update))
            commits.append(self._confirmer(step, created.uuid, sent_len, step.status, sent))
            return
        fields = {**step.text.write_fields("content"), **sent}
        if step.status != step.stored_status:
            fields.update(step.status_fields())
        result = await self.repo.update_message_reasoning(
            step.uuid, MessageReasoningUpdate(**fields)
        )
        if result is None:
            self._lost(step)
            return
        commits.append(self._confirmer(step, step.uuid, sent_len, step.status, sent))

    def _lost(self, record: TrackedRecord) -> None:
        record.lost = True
        self._missing.append(record)  # logged after the flush, unless the chat is gone

    async def recover(self, state: StorageState) -> None:
        """After a failed flush, re-read what the store really holds for this run's records."""
        chat_uuid = state.chat.chat_uuid
        stored = [
            m for m in await self.repo.get_chat_messages(chat_uuid) if m.run_id == state.run_id
        ]
        claimed: set[UUID] = set()
        for message in state.messages:
            match = next((m for m in stored if m.message_uuid == message.uuid), None)
            if match is None:
                match = next(
                    (
                        m
                        for m in stored
                        if m.message_uuid not in claimed
                        and m.message_uuid not in {t.uuid for t in state.messages}
                        and (
                            m.agui_id == message.agui_id
                            or (message.adopted_id and m.agui_id is None)
                        )
                        and m.role == message.role
                    ),
                    None,
                )
            if match is None:
                _reset(message)
                for child in (*message.tool_calls, *message.reasonings):
                    _reset(child)
                continue
            claimed.add(match.message_uuid)
            _sync(message, match.content, match.status, match.message_uuid)
            if match.agui_id != message.agui_id:
                message.changes["agui_id"] = message.agui_id  # stored before it had its id
            for call in message.tool_calls:
                found = next(
                    (
                        c
                        for c in match.tool_calls
                        if c.uuid == call.uuid or c.tool_call_id == call.tool_call_id
                    ),
                    None,
                )
                if found is None:
                    _reset(call)
                else:
                    _sync(call, found.arguments, found.status, found.uuid)
            taken: set[UUID] = set()
            for step in message.reasonings:
                candidates = [r for r in match.reasonings if r.uuid not in taken]
                found_step = next((r for r in candidates if r.uuid == step.uuid), None) or next(
                    (r for r in candidates if step.agui_id and r.agui_id == step.agui_id), None
                )
                if found_step is None and step.agui_id is None:
                    found_step = next((r for r in candidates if r.agui_id is None), None)
                if found_step is None:
                    _reset(step)
                else:
                    taken.add(found_step.uuid)
                    _sync(step, found_step.content, found_step.status, found_step.uuid)
        state.needs_recovery = False


def _reset(record: TrackedRecord) -> None:
    record.uuid = None
    record.stored_status = None
    record.text.stored_len = 0


def _sync(record: TrackedRecord, stored_text: str, status: str, uuid: UUID) -> None:
    record.uuid = uuid
    record.stored_status = status
    if record.text.value.startswith(stored_text):
        record.text.stored_len = len(stored_text)
    else:
        record.text.stored_len = None
