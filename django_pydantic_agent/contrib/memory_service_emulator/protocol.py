"""The wire plumbing shared by the emulator's views.

Error bodies in the service's shapes (:class:`HTTPError`), JSON and query-string parsing with
FastAPI-style 422 lists, bearer-token principals, the JSON renderings of spaces, sessions and
events, and the owner-scoped lookups every route starts with (404 for anything the caller does
not own, including malformed ids).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from pydantic import BaseModel, ValidationError

from django_pydantic_agent.contrib.memory_service_emulator.models import (
    EmulatedEvent,
    EmulatedMemorySpace,
    EmulatedSession,
)

SETTING_NAME = "MEMORY_SERVICE_EMULATOR"
TENANT_ID = uuid.UUID("6d656d6f-7279-4065-8d75-6c61746f7221")
"""The tenant every emulated principal belongs to (the emulator models a single tenant)."""

MAX_JSON_DEPTH = 64
"""Deeper request bodies answer 422 (databases cap JSON nesting; SQLite at 1000 levels)."""
MAX_SEQUENCE_ID = 2**63 - 1

_M = TypeVar("_M", bound=BaseModel)


# --------------------------------------------------------------------------- configuration


def setting(key: str, default: Any) -> Any:
    """Read ``settings.MEMORY_SERVICE_EMULATOR[key]`` at request time (so overrides apply)."""
    config = getattr(settings, SETTING_NAME, {})
    if not isinstance(config, Mapping):
        raise ImproperlyConfigured(
            f"settings.{SETTING_NAME} must be a dict, got {config!r}; for example "
            f'{SETTING_NAME} = {{"ALLOW_NEVER_TRIGGER": False}}.'
        )
    return config.get(key, default)


# --------------------------------------------------------------------------- errors


class HTTPError(Exception):
    """Raised anywhere in a view to answer ``status`` with a JSON ``payload``."""

    def __init__(
        self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(payload.get("detail"))
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})

    def response(self) -> JsonResponse:
        """The JSON response, with any extra headers (Location, Retry-After, Allow...)."""
        response = JsonResponse(self.payload, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


def not_found_error(detail: str) -> HTTPError:
    """A 404 with a string ``detail`` (the client maps it to ``DRMemoryNotFoundError``)."""
    return HTTPError(404, {"detail": detail})


def bad_request(detail: str) -> HTTPError:
    """A 400 with a string ``detail``, used for participant violations."""
    return HTTPError(400, {"detail": detail})


def invalid(loc: list[str | int], msg: str, value: Any, kind: str = "value_error") -> HTTPError:
    """A 422 in the FastAPI shape, with a single error."""
    return HTTPError(422, {"detail": [{"type": kind, "loc": loc, "msg": msg, "input": value}]})


def validate(model: type[_M], data: Any) -> _M:
    """Validate a parsed JSON body; raises a 422 listing every error, located under ``body``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False)
        for error in errors:
            error["loc"] = ("body", *error["loc"])
        raise HTTPError(422, {"detail": errors}) from exc


def json_body(request: HttpRequest) -> Any:
    """The request body parsed as strict JSON (finite numbers only); 422 if empty or invalid.

    Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` still applies and answers 413.
    """
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise HTTPError(
            413,
            {
                "detail": "The request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE allows; "
                "raise that setting for large event batches."
            },
        ) from exc
    if not raw:
        raise invalid(["body"], "Field required", None, kind="missing")
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise invalid(["body"], f"JSON decode error: {exc}", None, kind="json_invalid") from exc
    _check_storable(data)
    return data


def check_text(text: str, loc: list[str | int], value: Any = None) -> None:
    """422 unless ``text`` is storable on every database: no NUL, no lone surrogate.

    ``loc`` and ``value`` locate the error (``["body"]`` or ``["query", name]``).
    """
    where = "the body" if loc[0] == "body" else f"the {loc[0]} parameter {loc[-1]!r}"
    if "\x00" in text:
        raise invalid(
            loc,
            f"NUL characters (\\u0000) are not supported by the emulator; remove them from "
            f"{where}.",
            value,
            kind="string_type",
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(
            loc,
            f"Strings must be valid Unicode; {where} has a lone surrogate (e.g. \\ud800).",
            value,
            kind="string_unicode",
        ) from None


def _check_storable(value: Any) -> None:
    """422 for JSON the emulator cannot store alike on every database.

    Nesting is capped at :data:`MAX_JSON_DEPTH`; NUL characters and lone surrogates are refused
    anywhere, keys included, because PostgreSQL can store neither. Walks without recursion.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            check_text(item, ["body"])
            continue
        if isinstance(item, dict):
            stack.extend((key, level) for key in item)
            item = list(item.values())
        if isinstance(item, list):
            if level > MAX_JSON_DEPTH:
                raise invalid(
                    ["body"],
                    f"JSON nested deeper than {MAX_JSON_DEPTH} levels; flatten the structure.",
                    None,
                    kind="json_invalid",
                )
            stack.extend((child, level + 1) for child in item)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """Parse a JSON number with a fraction or exponent; one that overflows to infinity is refused.

    Neither PostgreSQL's ``jsonb`` nor SQLite's ``JSON_VALID`` accepts infinity, and JSON has no
    way to write it back.
    """
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(
            f"the number {text[:40]} is out of range; JSON numbers must be finite "
            "(within +/-1.8e308)"
        )
    return value


def query_text(request: HttpRequest, name: str) -> str | None:
    """The text query parameter ``name`` (the last one sent); ``None`` when absent.

    422 for NUL characters or lone surrogates, which no database can compare or store alike.
    """
    raw = request.GET.get(name)
    if raw is not None:
        check_text(raw, ["query", name], raw)
    return raw


def query_texts(request: HttpRequest, name: str) -> list[str]:
    """Every value of the repeatable query parameter ``name``, checked as :func:`query_text`."""
    values = request.GET.getlist(name)
    for value in values:
        check_text(value, ["query", name], value)
    return values


def query_int(request: HttpRequest, name: str, *, low: int, high: int | None) -> int | None:
    """The integer query parameter ``name`` within ``low..high``; ``None`` when absent, else 422.

    Digit strings beyond ``int()``'s limit (4300 digits) are a parsing error, as in pydantic.
    """
    raw = request.GET.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise invalid(
            ["query", name],
            "Input should be a valid integer, unable to parse string as an integer",
            raw,
            kind="int_parsing",
        ) from None
    if value < low:
        raise invalid(
            ["query", name],
            f"Input should be greater than or equal to {low}",
            raw,
            kind="greater_than_equal",
        )
    if high is not None and value > high:
        raise invalid(
            ["query", name], f"Input should be less than or equal to {high}", raw, "less_than_equal"
        )
    return value


def page_params(request: HttpRequest) -> tuple[int, int]:
    """``(offset, limit)`` from the query string: offset >= 0 (default 0), limit 1..100 (100)."""
    offset = query_int(request, "offset", low=0, high=None)
    limit = query_int(request, "limit", low=1, high=100)
    return (0 if offset is None else offset, 100 if limit is None else limit)


# --------------------------------------------------------------------------- identity


@dataclass(frozen=True, kw_only=True)
class Principal:
    """The caller behind a bearer token: a 24-hex user id derived from the token's hash."""

    user_id: str
    tenant_id: uuid.UUID = TENANT_ID


def authenticate(request: HttpRequest) -> Principal:
    """The principal of ``Authorization: Bearer <token>``; 401 when missing, malformed or refused.

    Any well-formed token is its own principal unless ``MEMORY_SERVICE_EMULATOR["TOKENS"]``
    lists the accepted ones. The token itself is never stored or echoed, only a hash prefix.
    """
    challenge = {"WWW-Authenticate": 'Bearer realm="memory"'}
    header = request.headers.get("Authorization")
    if header is None:
        raise HTTPError(
            401,
            {"detail": "Missing Authorization header; send 'Authorization: Bearer <token>'."},
            challenge,
        )
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(ch.isspace() for ch in token):
        raise HTTPError(
            401,
            {
                "detail": "Malformed Authorization header; send exactly "
                "'Authorization: Bearer <token>' with a token that has no spaces."
            },
            challenge,
        )
    accepted = setting("TOKENS", None)
    if isinstance(accepted, str | bytes):
        raise ImproperlyConfigured(
            f"settings.{SETTING_NAME}['TOKENS'] must be a list of tokens, got the string "
            f"{accepted!r}; wrap it in a list."
        )
    if accepted is not None and not any(
        hmac.compare_digest(token.encode(), str(known).encode()) for known in accepted
    ):
        raise HTTPError(
            401,
            {
                "detail": f"This bearer token is not in settings.{SETTING_NAME}['TOKENS']; "
                "use one of the configured tokens."
            },
            challenge,
        )
    digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
    return Principal(user_id=digest[:24])


# --------------------------------------------------------------------------- rendering


def timestamp(value: dt.datetime) -> str:
    """UTC ISO-8601 with microseconds and ``Z``, e.g. ``2026-11-30T15:22:28.185075Z``."""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def space_url(space: EmulatedMemorySpace) -> str:
    """The service-relative URL of a space, as dedup 409s report it."""
    return f"/memory/{space.uuid}/"


def session_url(session: EmulatedSession, space: EmulatedMemorySpace) -> str:
    """The service-relative URL of a session, as dedup 409s report it."""
    return f"/memory/{space.uuid}/sessions/{session.uuid}/"


def render_space(space: EmulatedMemorySpace) -> dict[str, Any]:
    """The MemorySpace JSON object."""
    return {
        "memorySpaceId": str(space.uuid),
        "userId": space.user_id,
        "tenantId": str(space.tenant_id),
        "description": space.description,
        "deduplicationKey": space.deduplication_key,
        "llmModelName": space.llm_model_name,
        "llmBaseUrl": space.llm_base_url,
        "customInstructions": space.custom_instructions,
        "createdAt": timestamp(space.created_at),
    }


def render_session(session: EmulatedSession, space: EmulatedMemorySpace) -> dict[str, Any]:
    """The Session JSON object; metadata and strategies are returned exactly as stored."""
    return {
        "id": str(session.uuid),
        "memorySpaceId": str(space.uuid),
        "participants": [session.participant],
        "description": session.description,
        "metadata": session.metadata,
        "createdAt": timestamp(session.created_at),
        "version": session.version,
        "deduplicationKey": session.deduplication_key,
        "lifecycleStrategies": session.lifecycle_strategies,
    }


def render_event(event: EmulatedEvent) -> dict[str, Any]:
    """The Event JSON object: integer ``sequenceId``, flat emitter fields, body as stored."""
    return {
        "sequenceId": event.sequence_id,
        "createdAt": timestamp(event.created_at),
        "body": event.body,
        "emitterType": event.emitter_type,
        "emitterId": event.emitter_id,
        "eventType": event.event_type,
    }


# --------------------------------------------------------------------------- lookups


def _parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def owned_space(principal: Principal, sp: str) -> EmulatedMemorySpace:
    """The caller's live space ``sp``; 404 for unknown, deleted, foreign or malformed ids."""
    space_uuid = _parse_uuid(sp)
    space = (
        None
        if space_uuid is None
        else EmulatedMemorySpace.objects.filter(
            uuid=space_uuid, user_id=principal.user_id, deleted_at__isnull=True
        ).first()
    )
    if space is None:
        raise not_found_error(f"Memory space {sp!r} was not found.")
    return space


def live_session(space: EmulatedMemorySpace, ss: str, *, lock: bool = False) -> EmulatedSession:
    """The live session ``ss`` of ``space``; ``lock`` selects it FOR UPDATE (inside atomic)."""
    session_uuid = _parse_uuid(ss)
    queryset: QuerySet[EmulatedSession] = EmulatedSession.objects.all()
    if lock:
        queryset = queryset.select_for_update()
    session = (
        None
        if session_uuid is None
        else queryset.filter(uuid=session_uuid, space=space, deleted_at__isnull=True).first()
    )
    if session is None:
        raise not_found_error(f"Session {ss!r} was not found in memory space {str(space.uuid)!r}.")
    return session


def live_events(session: EmulatedSession) -> QuerySet[EmulatedEvent]:
    """The session's events that are not soft-deleted."""
    return EmulatedEvent.objects.filter(session=session, deleted_at__isnull=True)


def no_content() -> HttpResponse:
    """An empty 204, without a Content-Type."""
    response = HttpResponse(status=204)
    del response["Content-Type"]
    return response
