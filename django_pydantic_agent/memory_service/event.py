"""``DREvent``: typed, append-only log entries under a session.

Bind a subclass to its session class with ``class Msg(DREvent, session=ChatSession)``. Every
field it declares travels inside the event ``body`` next to ``content``, serialised through its
declared type (nested models, lists, enums, datetimes, ``None``) and validated back on read.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Self, cast

from pydantic import BaseModel, PrivateAttr

from django_pydantic_agent.memory_service._serde import dump_value
from django_pydantic_agent.memory_service.client import json_object
from django_pydantic_agent.memory_service.errors import DRMemoryBadRequestError
from django_pydantic_agent.memory_service.session import (
    DRSession,
    _dump_overlay,
    _load_fields,
    _reject_reserved,
)

__all__ = ["DREvent"]

logger = logging.getLogger("django_pydantic_agent.memory_service")

MAX_BATCH = 200
EmitterType = Literal["user", "agent"]
_BASE_FIELDS = ("content", "emitter_type", "emitter_id")
_RESERVED = (*_BASE_FIELDS, "sequence_id", "created_at", "session")


class DREvent(BaseModel):
    """Base class of event models; subclass it with ``session=<DRSession subclass>``.

    Class variables:
        __event_type__: The event ``type`` sent on create: ``"message"`` (default),
            ``"tool_output"`` or ``"status"``.

    Attributes:
        content: Event text, 1-100 000 characters.
        emitter_type: ``"user"`` or ``"agent"``.
        emitter_id: The emitting user's ObjectId; for ``"user"`` it must be a participant.
    """

    __event_type__: ClassVar[str] = "message"
    __session_class__: ClassVar[type[DRSession] | None] = None

    content: str = ""
    emitter_type: EmitterType = "agent"
    emitter_id: str | None = None

    _session: DRSession | None = PrivateAttr(default=None)
    _sequence_id: int = PrivateAttr(default=-1)
    _created_at: str = PrivateAttr(default="")

    def __init_subclass__(cls, *, session: type[DRSession] | None = None, **kwargs: Any) -> None:
        _reject_reserved(cls, "DREvent", _RESERVED)
        if session is not None:
            if not (isinstance(session, type) and issubclass(session, DRSession)):
                raise TypeError(
                    f"{cls.__name__} was bound to session={session!r}, which is not a DRSession "
                    "subclass; pass the session class, e.g. class Msg(DREvent, session=Chat)."
                )
            cls.__session_class__ = session
        super().__init_subclass__(**kwargs)

    @classmethod
    def _body_fields(cls) -> list[str]:
        return [name for name in cls.model_fields if name not in _BASE_FIELDS]

    # Read-only server attributes -------------------------------------------------------------

    @property
    def sequence_id(self) -> int:
        """Server-assigned position in the session; ``-1`` before the event is posted."""
        # Read from the private values directly: ``self._sequence_id`` goes through pydantic's
        # ``__getattr__`` (an AttributeError raised and caught per read), and the run path
        # reads it for every message of its window (ordering, replay).
        private = self.__pydantic_private__
        if private is not None and "_sequence_id" in private:
            sequence_id: int = private["_sequence_id"]
            return sequence_id
        return self._sequence_id

    @property
    def created_at(self) -> str:
        """ISO-8601 timestamp; also the concurrency token :meth:`patch` sends."""
        return self._created_at

    @property
    def session(self) -> DRSession:
        """The session this event was posted to or read from.

        Raises:
            ValueError: If the instance was built directly rather than by the class methods.
        """
        if self._session is None or self._sequence_id < 0:
            raise ValueError(
                f"{type(self).__name__} instance {self!r} is not bound to a stored event; "
                "obtain events from post(), post_batch(), list() or last()."
            )
        return self._session

    @property
    def _path(self) -> str:
        return f"{self.session._path}events/{self._sequence_id}/"

    # Wire conversion --------------------------------------------------------------------------

    @classmethod
    def _check_session(cls, session: DRSession) -> None:
        bound = cls.__session_class__
        if bound is not None and not isinstance(session, bound):
            raise TypeError(
                f"{cls.__name__} is bound to {bound.__name__} sessions but got "
                f"{type(session).__name__} {session.id!r}; use an event class bound to it."
            )
        _ = session._path  # raises ValueError for an unsaved session

    @classmethod
    def _from_wire(cls, session: DRSession, data: Mapping[str, Any]) -> Self:
        instance = cast(Self, cls.model_construct())
        instance._session = session
        raw_seq = data.get("sequenceId")
        instance._sequence_id = int(raw_seq) if raw_seq is not None else -1
        instance.emitter_type = data.get("emitterType") or "agent"
        instance.emitter_id = data.get("emitterId")
        instance._apply(data)
        return instance

    def _apply(self, data: Mapping[str, Any]) -> None:
        """Copy the keys present in an event object onto this instance."""
        cls = type(self)
        if "createdAt" in data:
            self._created_at = str(data["createdAt"])
        if data.get("emitterType"):
            self.emitter_type = data["emitterType"]
        if "emitterId" in data:
            self.emitter_id = data["emitterId"]
        if "body" in data:
            body = data["body"] if isinstance(data["body"], dict) else {}
            self.content = body.get("content")  # type: ignore[assignment]
            _load_fields(self, cls._body_fields(), body)

    @classmethod
    def _check_declared(cls, names: Iterable[str], *, where: str) -> None:
        declared = cls._body_fields()
        unknown = sorted(set(names) - set(declared))
        if unknown:
            raise ValueError(
                f"{where} got undeclared fields {unknown!r}; declare them on {cls.__name__} "
                f"(declared: {sorted(declared)!r})."
            )

    @classmethod
    def _check_batch_size(cls, operation: str, count: int, noun: str) -> None:
        if count > MAX_BATCH:
            raise ValueError(
                f"{cls.__name__}.{operation}() got {count} {noun}; the service takes at most "
                f"{MAX_BATCH} per batch, split the list."
            )

    @classmethod
    async def _items(
        cls, session: DRSession, method: str, tail: str, **kwargs: Any
    ) -> builtins.list[dict[str, Any]]:
        """Send one request to the session's ``events/<tail>``; return the answer's ``items``."""
        response = await session.space.client.request(
            method, f"{session._path}events/{tail}", **kwargs
        )
        return json_object(response).get("items") or []

    @classmethod
    def _create_item(
        cls,
        session: DRSession,
        item: Mapping[str, Any],
        *,
        where: str,
    ) -> dict[str, Any]:
        """Build one create body, applying the local checks (undeclared fields, emitter)."""
        extra = {k: v for k, v in item.items() if k not in _BASE_FIELDS}
        cls._check_declared(extra, where=where)
        emitter_type = item["emitter_type"]
        emitter_id = item.get("emitter_id")
        if emitter_type == "user" and emitter_id is not None:
            participants = session.participants
            if emitter_id not in participants:
                raise DRMemoryBadRequestError(
                    f"{where}: emitter_id {emitter_id!r} is not a participant of session "
                    f"{session.id!r} ({participants!r}); a user event must come from a "
                    "participant, use one of them or emitter_type='agent'.",
                )
        body: dict[str, Any] = {"content": item["content"]}
        for name, value in extra.items():
            body[name] = dump_value(cls.model_fields[name], value)
        emitter: dict[str, Any] = {"type": emitter_type}
        if emitter_id is not None:
            emitter["id"] = emitter_id
        return {"type": cls.__event_type__, "body": body, "emitter": emitter}

    def _patch_item(
        self,
        content: str | None,
        emitter_type: EmitterType | None,
        emitter_id: str | None,
        fields: Mapping[str, Any],
        *,
        where: str,
    ) -> dict[str, Any]:
        """Build one patch body: the full body if content or a field changes, and the emitter."""
        cls = type(self)
        cls._check_declared(fields, where=where)
        item: dict[str, Any] = {}
        if content is not None or fields:
            item["body"] = {
                "content": content if content is not None else self.content,
                **_dump_overlay(self, cls._body_fields(), fields),
            }
        if emitter_type is not None or emitter_id is not None:
            emitter: dict[str, Any] = {"type": emitter_type or self.emitter_type}
            new_id = emitter_id if emitter_id is not None else self.emitter_id
            if new_id is not None:
                emitter["id"] = new_id
            item["emitter"] = emitter
        if not item:
            raise ValueError(
                f"{where} was given nothing to change for event {self._sequence_id!r}; pass "
                "content, emitter_type, emitter_id or a declared field."
            )
        return item

    # Class-level operations --------------------------------------------------------------------

    @classmethod
    async def post(
        cls,
        session: DRSession,
        *,
        content: str,
        emitter_type: EmitterType,
        emitter_id: str | None = None,
        **kwargs: Any,
    ) -> Self:
        """Append one event to ``session`` and return it with its server attributes.

        Raises:
            ValueError: For undeclared body fields.
            TypeError: If ``session`` is not of the class this event is bound to.
            DRMemoryBadRequestError: If ``emitter_type="user"`` and ``emitter_id`` is not in
                ``session.participants`` (checked before any request; ``status_code=None``).
            DRMemoryValidationError: If the service rejects a value (e.g. empty content).
        """
        cls._check_session(session)
        item = {"content": content, "emitter_type": emitter_type, "emitter_id": emitter_id}
        payload = cls._create_item(session, {**item, **kwargs}, where=f"{cls.__name__}.post()")
        response = await session.space.client.request(
            "POST", f"{session._path}events/", json=payload
        )
        return cls._from_wire(session, json_object(response))

    @classmethod
    async def post_batch(
        cls, session: DRSession, events: Sequence[Mapping[str, Any]]
    ) -> list[Self]:
        """Append up to 200 events atomically, in order; all or none are stored.

        Each mapping takes :meth:`post`'s keyword arguments.

        Raises:
            ValueError: Over 200 events, an item without ``content``/``emitter_type``, or an
                undeclared field.
            DRMemoryBadRequestError: A user emitter that is not a participant (pre-checked).
        """
        cls._check_session(session)
        cls._check_batch_size("post_batch", len(events), "events")
        payload = []
        for index, event in enumerate(events):
            where = f"{cls.__name__}.post_batch() item {index}"
            missing = [k for k in ("content", "emitter_type") if k not in event]
            if missing:
                raise ValueError(
                    f"{where} lacks {missing!r}; every item needs content and emitter_type."
                )
            payload.append(cls._create_item(session, event, where=where))
        items = await cls._items(session, "POST", "batch/", json={"events": payload})
        return [cls._from_wire(session, item) for item in items]

    @classmethod
    async def list(
        cls,
        session: DRSession,
        type: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> builtins.list[Self]:
        """Return one page of live events in sequence order, of every type unless ``type``.

        Raises:
            DRMemoryValidationError: For ``limit`` outside 1-100 or an unknown ``type``.
            DRMemoryNotFoundError: If the session or space is gone.
        """
        return await cls._read(session, type, offset=offset, limit=limit)

    @classmethod
    async def last(
        cls,
        session: DRSession,
        n: int,
        type: str | None = None,
    ) -> builtins.list[Self]:
        """Return the last ``n`` (1-100) live events, oldest first, optionally of one ``type``."""
        return await cls._read(session, type, lastN=n)

    @classmethod
    async def _read(
        cls, session: DRSession, type: str | None, **params: Any
    ) -> builtins.list[Self]:
        """List or last: ``params`` plus the optional ``type`` filter, as bound events."""
        cls._check_session(session)
        if type is not None:
            params["eventType"] = type
        items = await cls._items(session, "GET", "", params=params)
        return [cls._from_wire(session, item) for item in items]

    @classmethod
    async def patch_batch(
        cls,
        session: DRSession,
        updates: Sequence[tuple[DREvent, Mapping[str, Any]]],
    ) -> builtins.list[Self]:
        """Update up to 200 events atomically, each guarded by its ``created_at`` token.

        Each update is ``(event, kwargs)`` with :meth:`patch`'s keyword arguments. Events are
        updated in place and returned in input order.

        Raises:
            ValueError: Over 200 updates, an item with nothing to change, or an event from
                another session.
            DRMemoryVersionConflictError: If any token is stale; nothing is changed.
        """
        cls._check_session(session)
        cls._check_batch_size("patch_batch", len(updates), "updates")
        payload = []
        for index, (event, changes) in enumerate(updates):
            where = f"{cls.__name__}.patch_batch() item {index}"
            if event.session.id != session.id:
                raise ValueError(
                    f"{where}: event {event.sequence_id!r} belongs to session "
                    f"{event.session.id!r}, not {session.id!r}; batch each session separately."
                )
            fields = {k: v for k, v in changes.items() if k not in _BASE_FIELDS}
            item = event._patch_item(
                changes.get("content"),
                changes.get("emitter_type"),
                changes.get("emitter_id"),
                fields,
                where=where,
            )
            item = {"sequenceId": event.sequence_id, **item}
            if event.created_at:
                item["createdAt"] = event.created_at
            payload.append(item)
        items = await cls._items(session, "PATCH", "batch/", json={"events": payload})
        by_sequence = {item.get("sequenceId"): item for item in items}
        result: builtins.list[Self] = []
        for event, _ in updates:
            data = by_sequence.get(event.sequence_id)
            if data is None:
                logger.warning(
                    "The batch patch answer for session %r has no item for event %r; its local "
                    "copy and created_at token may be stale, re-read it before patching again.",
                    session.id,
                    event.sequence_id,
                )
            else:
                event._apply(data)
            result.append(event)  # type: ignore[arg-type]
        return result

    # Instance operations -----------------------------------------------------------------------

    async def patch(
        self,
        *,
        content: str | None = None,
        emitter_type: EmitterType | None = None,
        emitter_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Update this event in place, guarded by its ``created_at`` token.

        A content or field change resends the whole body (current non-``None`` values overlaid
        with the new ones; an explicit ``None`` for a field clears it).

        Raises:
            ValueError: If nothing is given or a field is undeclared.
            DRMemoryVersionConflictError: If the event changed since it was read; re-list it
                to get a fresh token and retry.
            DRMemoryBadRequestError: If the new user emitter is not a participant.
        """
        item = self._patch_item(
            content, emitter_type, emitter_id, kwargs, where=f"{type(self).__name__}.patch()"
        )
        params = {"createdAt": self._created_at} if self._created_at else None
        response = await self.session.space.client.request(
            "PATCH", self._path, params=params, json=item
        )
        self._apply(json_object(response))

    async def delete(self) -> None:
        """Soft-delete this event; it leaves ``list``/``last`` and its id is never reused."""
        await self.session.space.client.request("DELETE", self._path)
