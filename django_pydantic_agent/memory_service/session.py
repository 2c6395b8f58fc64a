"""``DRSession``: typed documents stored as Memory Service sessions.

Subclass :class:`DRSession` and declare fields; markers from
:mod:`django_pydantic_agent.memory_service.keys` route each field to ``deduplicationKey``,
a ``description`` segment, the ``version`` mirror or ``metadata``. The routing is checked when the
class is created.
"""

from __future__ import annotations

import builtins
import copy
import inspect
from collections.abc import AsyncGenerator, Iterable, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Self, cast
from urllib.parse import quote

from pydantic import BaseModel, PrivateAttr

from django_pydantic_agent.memory_service._serde import dump_value, field_default, load_value
from django_pydantic_agent.memory_service.client import json_object
from django_pydantic_agent.memory_service.errors import (
    DRMemoryConflictError,
    DRMemoryNotFoundError,
    DRMemoryServiceError,
)
from django_pydantic_agent.memory_service.keys import (
    DEFAULT_SESSION_TTL_SECONDS,
    SYSTEM_PARTICIPANT,
    SessionRouting,
    build_session_routing,
    decode_description,
    encode_description,
)
from django_pydantic_agent.memory_service.space import DRMemorySpace

__all__ = ["DRSession"]

PAGE_SIZE = 100
_RESERVED = ("participants", "id", "created_at", "version", "lifecycle_strategies", "space")


def _reject_reserved(cls: type[BaseModel], base: str, reserved: tuple[str, ...]) -> None:
    """Refuse a subclass field named like one of ``base``'s ``reserved`` attributes."""
    for name in inspect.get_annotations(cls):
        if name in reserved:
            raise TypeError(
                f"{cls.__name__}.{name} uses a name reserved by {base} "
                f"({', '.join(reserved)}); rename the field."
            )


def _load_fields(model: BaseModel, names: Iterable[str], stored: Mapping[str, Any]) -> None:
    """Set each of ``names`` on ``model`` from its ``stored`` wire value, or to its default."""
    cls = type(model)
    for name in names:
        field = cls.model_fields[name]
        value = (
            load_value(cls.__name__, name, field, stored[name])
            if name in stored
            else field_default(field)
        )
        setattr(model, name, value)


def _dump_overlay(
    model: BaseModel, names: Iterable[str], changes: Mapping[str, Any]
) -> dict[str, Any]:
    """Wire values of ``names``: ``changes`` over the current values; ``None`` only if given."""
    fields = type(model).model_fields
    dumped: dict[str, Any] = {}
    for name in names:
        value = changes[name] if name in changes else getattr(model, name)
        if name in changes or value is not None:
            dumped[name] = dump_value(fields[name], value)
    return dumped


class DRSession(BaseModel):
    """Base class of session models; subclass it, never instantiate it directly.

    Class variables:
        __description_prefix__: First segment of every stored ``description`` and of every list
            filter (defaults to the class name). Keep it short and stable.
        __lifecycle_strategies__: Strategies sent on create only. Defaults to one
            ``soft_delete`` after :data:`DEFAULT_SESSION_TTL_SECONDS`; ``[]`` sends none (the
            service then applies its own default).
    """

    __description_prefix__: ClassVar[str] = ""
    __lifecycle_strategies__: ClassVar[list[dict[str, Any]]] = [
        {"type": "soft_delete", "trigger": {"ttl": DEFAULT_SESSION_TTL_SECONDS}}
    ]

    _space: DRMemorySpace | None = PrivateAttr(default=None)
    _id: str = PrivateAttr(default="")
    _created_at: str = PrivateAttr(default="")
    _version: int = PrivateAttr(default=1)
    _participants: list[str] = PrivateAttr(default_factory=lambda: [SYSTEM_PARTICIPANT])
    _lifecycle_strategies: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        _reject_reserved(cls, "DRSession", _RESERVED)
        super().__init_subclass__(**kwargs)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.__pydantic_complete__:
            cls._routing()

    @classmethod
    def _routing(cls) -> SessionRouting:
        cached = cls.__dict__.get("_dr_routing")
        if isinstance(cached, SessionRouting):
            return cached
        if cls is DRSession:
            raise TypeError(
                "DRSession is abstract; declare a subclass with your fields and call the "
                "class methods on it."
            )
        routing = build_session_routing(cls.__name__, dict(cls.model_fields))
        cls._dr_routing = routing  # type: ignore[attr-defined]
        return routing

    @classmethod
    def _prefix(cls) -> str:
        return cls.__description_prefix__ or cls.__name__

    # Read-only server attributes -------------------------------------------------------------

    @property
    def id(self) -> str:
        """Server-assigned session UUID (``""`` before the session is stored)."""
        return self._id

    @property
    def created_at(self) -> str:
        """ISO-8601 creation timestamp from the service."""
        return self._created_at

    @property
    def version(self) -> int:
        """Server version integer, sent as ``If-Match`` by :meth:`patch`."""
        return self._version

    @property
    def participants(self) -> list[str]:
        """Participant ObjectIds (a copy); fixed at creation."""
        return list(self._participants)

    @property
    def lifecycle_strategies(self) -> list[dict[str, Any]]:
        """The lifecycle strategies the service stores for this session (a deep copy)."""
        return copy.deepcopy(self._lifecycle_strategies)

    @property
    def space(self) -> DRMemorySpace:
        """The space this session was read from.

        Raises:
            ValueError: If the instance was built directly rather than by ``post``/``get``.
        """
        if self._space is None or not self._id:
            raise ValueError(
                f"{type(self).__name__} instance {self!r} is not bound to a stored session; "
                "obtain sessions from post(), get() or list() rather than the constructor."
            )
        return self._space

    @property
    def _path(self) -> str:
        """This session's path relative to the client's base URL, ending in ``/``."""
        return f"{self.space.path}sessions/{quote(self._id, safe='')}/"

    # Wire conversion --------------------------------------------------------------------------

    @classmethod
    def _from_wire(cls, space: DRMemorySpace, data: dict[str, Any]) -> Self:
        routing = cls._routing()
        fields = cls.model_fields
        values: dict[str, Any] = {}
        for name in (*routing.range_keys, *routing.metadata):
            values[name] = field_default(fields[name])
        if routing.dedup is not None:
            values[routing.dedup] = field_default(fields[routing.dedup])
        instance = cast(Self, cls.model_construct(**values))
        instance._space = space
        instance._id = str(data.get("id") or "")
        raw_version = data.get("version")
        instance._version = int(raw_version) if raw_version is not None else 1
        instance._participants = [str(p) for p in data.get("participants") or [SYSTEM_PARTICIPANT]]
        instance._lifecycle_strategies = copy.deepcopy(data.get("lifecycleStrategies") or [])
        instance._apply(data)
        return instance

    def _apply(self, data: dict[str, Any]) -> None:
        """Copy the keys present in a session object onto this instance."""
        cls = type(self)
        routing = cls._routing()
        fields = cls.model_fields
        if "createdAt" in data:
            self._created_at = str(data["createdAt"])
        if data.get("version") is not None:
            self._version = int(data["version"])
        if "lifecycleStrategies" in data:
            self._lifecycle_strategies = copy.deepcopy(data["lifecycleStrategies"] or [])
        if routing.concurrency is not None:
            setattr(self, routing.concurrency, self._version)
        if "description" in data and routing.range_keys:
            decoded = decode_description(
                cls._prefix(), data["description"], len(routing.range_keys)
            )
            segments = (
                {} if decoded is None else dict(zip(routing.range_keys, decoded, strict=True))
            )
            _load_fields(self, routing.range_keys, segments)
        if routing.dedup is not None and data.get("deduplicationKey") is not None:
            name = routing.dedup
            setattr(
                self, name, load_value(cls.__name__, name, fields[name], data["deduplicationKey"])
            )
        if "metadata" in data:
            stored = data["metadata"] if isinstance(data["metadata"], dict) else {}
            _load_fields(self, routing.metadata, stored)

    @classmethod
    def _segments(cls, values: dict[str, Any], names: Iterable[str]) -> list[str]:
        fields = cls.model_fields
        segments: list[str] = []
        for name in names:
            value = values.get(name)
            if value is None or value == "":
                raise ValueError(
                    f"{cls.__name__}.{name} is a DRRangeKey and got {value!r}; range-key "
                    "values must be non-empty, pass a value."
                )
            segments.append(str(dump_value(fields[name], value)))
        return segments

    # Class-level operations --------------------------------------------------------------------

    @classmethod
    async def post(cls, space: DRMemorySpace, **kwargs: Any) -> Self:
        """Create a session in ``space``, or adopt the live one holding the same dedup key.

        ``kwargs`` are declared field values plus ``participants`` (a one-item list of 24-hex
        ObjectIds; defaults to ``[SYSTEM_PARTICIPANT]``). On a deduplication conflict the
        existing session is fetched and returned and the given values are ignored.

        Raises:
            ValueError: For undeclared kwargs, the ``DRConcurrencyField`` (server-owned), an
                empty range-key value, or a description over 1000 characters.
            DRMemoryNotFoundError: If the space is unknown or deleted.
            DRMemoryValidationError: If the service rejects a value.
        """
        routing = cls._routing()
        fields = cls.model_fields
        participants = kwargs.pop("participants", None)
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise ValueError(
                f"{cls.__name__}.post() got undeclared fields {unknown!r}; declare them on the "
                f"class or remove them (declared: {sorted(fields)!r}, plus 'participants')."
            )
        if routing.concurrency is not None and routing.concurrency in kwargs:
            raise ValueError(
                f"{cls.__name__}.post() got {routing.concurrency}="
                f"{kwargs[routing.concurrency]!r}, but that DRConcurrencyField mirrors the "
                "server version; do not pass it."
            )
        range_values = {
            name: kwargs[name] if name in kwargs else field_default(fields[name])
            for name in routing.range_keys
        }
        body: dict[str, Any] = {
            "participants": list(participants) if participants else [SYSTEM_PARTICIPANT],
        }
        if routing.dedup is not None and kwargs.get(routing.dedup) is not None:
            body["deduplicationKey"] = str(kwargs[routing.dedup])
        body["description"] = encode_description(
            cls._prefix(), cls._segments(range_values, routing.range_keys)
        )
        metadata = {
            name: dump_value(fields[name], kwargs[name])
            for name in routing.metadata
            if name in kwargs
        }
        if metadata:
            body["metadata"] = metadata
        body["lifecycleStrategies"] = copy.deepcopy(cls.__lifecycle_strategies__)
        try:
            response = await space.client.request("POST", f"{space.path}sessions/", json=body)
        except DRMemoryConflictError as exc:
            if not exc.existing_id:
                raise
            return await cls.get(space, id=exc.existing_id)
        return cls._from_wire(space, json_object(response))

    @classmethod
    async def get(cls, space: DRMemorySpace, id: str | None = None, **kwargs: Any) -> Self:
        """Fetch a session by server ``id`` or by its deduplication-key field (exactly one).

        Raises:
            ValueError: If neither or both are given, or a keyword is not the dedup field.
            DRMemoryNotFoundError: If no live session matches (a dedup miss is detected
                client-side and carries ``status_code=404``).
        """
        routing = cls._routing()
        if kwargs:
            names = sorted(kwargs)
            if routing.dedup is None or names != [routing.dedup]:
                expected = (
                    f"only {routing.dedup!r}"
                    if routing.dedup is not None
                    else "none (the class has no DRDeduplicationKey field)"
                )
                raise ValueError(
                    f"{cls.__name__}.get() got keywords {names!r}; it accepts id= or the "
                    f"deduplication-key field, here {expected}."
                )
        if (id is None) == (not kwargs):
            raise ValueError(
                f"{cls.__name__}.get() needs exactly one of id= or the deduplication-key "
                f"field; got id={id!r} and {sorted(kwargs)!r}."
            )
        if id is not None:
            response = await space.client.request(
                "GET", f"{space.path}sessions/{quote(id, safe='')}/"
            )
            return cls._from_wire(space, json_object(response))
        assert routing.dedup is not None
        key = str(kwargs[routing.dedup])
        async with aclosing(cls._pages(space, {"deduplicationKey": key})) as pages:
            async for item in pages:
                if item.get("deduplicationKey") == key:
                    return cls._from_wire(space, item)
        raise DRMemoryNotFoundError(
            f"No {cls.__name__} with {routing.dedup}={key!r} exists in memory space {space.id!r}.",
            404,
        )

    @classmethod
    async def _pages(
        cls, space: DRMemorySpace, filters: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield every item of an offset/limit session listing, fetching pages lazily."""
        offset = 0
        while True:
            params = {**filters, "offset": offset, "limit": PAGE_SIZE}
            response = await space.client.request("GET", f"{space.path}sessions/", params=params)
            page = json_object(response)
            items = page.get("items") or []
            for item in items:
                yield item
            offset += len(items)
            total = page.get("total")
            if len(items) < PAGE_SIZE or (total is not None and offset >= int(total)):
                return

    @classmethod
    async def list(
        cls, space: DRMemorySpace, *, participant: str | None = None, **kwargs: Any
    ) -> builtins.list[Self]:
        """Return every live session of this class in ``space`` (all pages fetched).

        The query always carries this class's ``//prefix/`` filter, so other session classes
        sharing the space never appear. ``kwargs`` narrow it by a contiguous leading prefix of
        the range keys; ``participant`` keeps sessions including that ObjectId.

        Raises:
            ValueError: If kwargs are not range keys forming a contiguous leading prefix, or a
                value is empty.
            DRMemoryBadRequestError: If ``participant`` is not a valid ObjectId.
        """
        routing = cls._routing()
        given = set(kwargs)
        expected = routing.range_keys[: len(given)]
        if given != set(expected):
            raise ValueError(
                f"{cls.__name__}.list() got {sorted(given)!r}; range-key filters must be a "
                f"contiguous leading prefix of {list(routing.range_keys)!r} (e.g. "
                f"{list(routing.range_keys[:1])!r})."
            )
        needle = encode_description(cls._prefix(), cls._segments(kwargs, expected), complete=False)
        filters: dict[str, Any] = {"description": needle}
        if participant is not None:
            filters["participants"] = participant
        return [cls._from_wire(space, item) async for item in cls._pages(space, filters)]

    # Instance operations -----------------------------------------------------------------------

    async def patch(self, **kwargs: Any) -> None:
        """Update metadata and/or range-key fields, guarded by ``If-Match: <version>``.

        Sends the full declared metadata (current non-``None`` values overlaid with the new
        ones) when a metadata field changes, and the re-encoded description when a range key
        changes. The instance reflects the service's answer, including the new version.

        Raises:
            ValueError: If nothing is given, or a field cannot change (``participants``, the
                dedup key, the concurrency field) or is undeclared.
            DRMemoryVersionConflictError: If the session changed since this instance was read;
                re-fetch with :meth:`get` and retry.
        """
        cls = type(self)
        routing = cls._routing()
        if not kwargs:
            raise ValueError(
                f"{cls.__name__}.patch() on session {self._id!r} was given nothing to change; "
                "pass metadata or range-key fields."
            )
        changeable = set(routing.metadata) | set(routing.range_keys)
        refused = sorted(set(kwargs) - changeable)
        if refused:
            raise ValueError(
                f"{cls.__name__}.patch() cannot change {refused!r}; participants, the "
                "deduplication key and the concurrency field are fixed, and only declared "
                f"fields exist. Changeable: {sorted(changeable)!r}."
            )
        body: dict[str, Any] = {}
        if any(name in kwargs for name in routing.metadata):
            body["metadata"] = _dump_overlay(self, routing.metadata, kwargs)
        if any(name in kwargs for name in routing.range_keys):
            current = {name: getattr(self, name) for name in routing.range_keys}
            current.update({k: v for k, v in kwargs.items() if k in routing.range_keys})
            body["description"] = encode_description(
                cls._prefix(), cls._segments(current, routing.range_keys)
            )
        response = await self.space.client.request(
            "PATCH", self._path, json=body, extra_headers={"If-Match": str(self._version)}
        )
        self._apply(json_object(response))

    async def patch_lifecycle_strategies(self, strategies: builtins.list[dict[str, Any]]) -> None:
        """Replace the stored lifecycle strategies wholesale (``If-Match`` guarded).

        Raises:
            ValueError: If ``strategies`` is empty.
            DRMemoryVersionConflictError: If the session changed since it was read.
            DRMemoryServiceError: If the service answered success without advancing the
                version (a service that ignores the field), or refused to change an
                already-executed strategy (409).
        """
        if not strategies:
            raise ValueError(
                f"patch_lifecycle_strategies() on session {self._id!r} got {strategies!r}; "
                "pass 1 to 5 strategy objects (the service refuses an empty list)."
            )
        before = self._version
        response = await self.space.client.request(
            "PATCH",
            self._path,
            json={"lifecycleStrategies": copy.deepcopy(strategies)},
            extra_headers={"If-Match": str(before)},
        )
        data = json_object(response)
        self._apply(data)
        if self._version <= before:
            raise DRMemoryServiceError(
                f"The Memory Service accepted new lifecycle strategies for session "
                f"{self._id!r} but its version stayed at {self._version!r}; the service "
                "ignored the change (it needs lifecycle strategy support on PATCH).",
                response.status_code,
                data,
            )

    async def delete(self) -> None:
        """Soft-delete this session: it leaves lists and lookups and its dedup key is freed."""
        await self.space.client.request("DELETE", self._path)
