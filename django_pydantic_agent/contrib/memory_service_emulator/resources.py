"""Handlers for memory spaces and sessions (dedup 409s, ``If-Match`` versions, filters)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.utils import timezone

from django_pydantic_agent.contrib.memory_service_emulator import schemas
from django_pydantic_agent.contrib.memory_service_emulator.models import (
    EmulatedMemorySpace,
    EmulatedSession,
)
from django_pydantic_agent.contrib.memory_service_emulator.protocol import (
    SETTING_NAME,
    HTTPError,
    Principal,
    bad_request,
    invalid,
    json_body,
    live_session,
    no_content,
    owned_space,
    page_params,
    query_text,
    query_texts,
    render_session,
    render_space,
    session_url,
    setting,
    space_url,
    validate,
)

# --------------------------------------------------------------------------- spaces


def list_spaces(request: HttpRequest, principal: Principal) -> HttpResponseBase:
    """GET ``memory/``: the caller's live spaces, oldest first, ``offset``/``limit`` paged."""
    offset, limit = page_params(request)
    key = query_text(request, "deduplicationKey")
    spaces = EmulatedMemorySpace.objects.filter(user_id=principal.user_id, deleted_at__isnull=True)
    if key is not None:
        spaces = spaces.filter(deduplication_key=key)
    total = spaces.count()
    window = spaces.order_by("pk")[offset : offset + limit] if offset < total else []
    items = [render_space(space) for space in window]
    return JsonResponse({"items": items, "total": total})


def _space_conflict(space: EmulatedMemorySpace) -> HTTPError:
    url = space_url(space)
    return HTTPError(
        409,
        {
            "detail": f"A memory space with deduplicationKey {space.deduplication_key!r} "
            f"already exists ({space.uuid}); reuse it or pick another key.",
            "errorName": "MemorySpaceDeduplicationConflict",
            "deduplicationKey": space.deduplication_key,
            "existingMemorySpaceId": str(space.uuid),
            "existingMemorySpaceUrl": url,
        },
        {"Location": url},
    )


def create_space(request: HttpRequest, principal: Principal) -> HttpResponseBase:
    """POST ``memory/new/``: 201 with the space; 409 ``MemorySpaceDeduplicationConflict``."""
    data = json_body(request)
    body = validate(schemas.SpaceCreate, data)
    key = body.deduplicationKey

    try:
        # The partial unique constraint on live keys decides; a duplicate is a 409, races included.
        with transaction.atomic():
            space = EmulatedMemorySpace.objects.create(
                user_id=principal.user_id,
                tenant_id=principal.tenant_id,
                description=body.description,
                deduplication_key=key,
                llm_model_name=body.llmModelName,
                llm_base_url=body.llmBaseUrl,
                custom_instructions=body.customInstructions,
                created_at=timezone.now(),
            )
    except IntegrityError:
        existing = EmulatedMemorySpace.objects.filter(
            user_id=principal.user_id, deduplication_key=key, deleted_at__isnull=True
        ).first()
        if key is None or existing is None:  # pragma: no cover - no other constraint can fail
            raise
        raise _space_conflict(existing) from None
    return JsonResponse(render_space(space), status=201)


def get_space(request: HttpRequest, principal: Principal, sp: str) -> HttpResponseBase:
    """GET ``memory/{sp}/``: 200 with the space, 404 unless the caller owns it."""
    return JsonResponse(render_space(owned_space(principal, sp)))


_SPACE_PATCH_FIELDS = {
    "description": "description",
    "llmModelName": "llm_model_name",
    "llmBaseUrl": "llm_base_url",
    "customInstructions": "custom_instructions",
}


def patch_space(request: HttpRequest, principal: Principal, sp: str) -> HttpResponseBase:
    """PATCH ``memory/{sp}/``: replace the fields sent (null clears), 200 with the space.

    ``{}`` answers 422 (spec 4.4: a non-empty subset); unknown keys are ignored.
    """
    body = validate(schemas.SpacePatch, json_body(request))
    with transaction.atomic():
        space = owned_space(principal, sp)
        changed = []
        for wire, column in _SPACE_PATCH_FIELDS.items():
            if wire in body.model_fields_set:
                setattr(space, column, getattr(body, wire))
                changed.append(column)
        if changed:
            space.save(update_fields=changed)
    return JsonResponse(render_space(space))


def delete_space(request: HttpRequest, principal: Principal, sp: str) -> HttpResponseBase:
    """DELETE ``memory/{sp}/``: soft delete (frees the key, hides everything below)."""
    with transaction.atomic():
        space = owned_space(principal, sp)
        EmulatedMemorySpace.objects.filter(pk=space.pk).update(deleted_at=timezone.now())
    return no_content()


# --------------------------------------------------------------------------- sessions


def _strategies_allowed(
    strategies: list[schemas.Strategy], stored: list[dict[str, Any]] | None, field: str
) -> None:
    """Refuse ``never`` triggers unless the gate is on or that type already stores one."""
    if setting("ALLOW_NEVER_TRIGGER", False):
        return
    stored_never = {
        item.get("type")
        for item in stored or []
        if isinstance(item, dict)
        and isinstance(item.get("trigger"), dict)
        and item["trigger"].get("never") is True
    }
    for index, strategy in enumerate(strategies):
        if strategy.is_never and strategy.type not in stored_never:
            raise invalid(
                ["body", field, index, "trigger", "never"],
                "The never trigger is disabled on this service; use a ttl or idle trigger, or "
                f"enable settings.{SETTING_NAME}['ALLOW_NEVER_TRIGGER'].",
                True,
            )


def _session_conflict(session: EmulatedSession, space: EmulatedMemorySpace) -> HTTPError:
    url = session_url(session, space)
    return HTTPError(
        409,
        {
            "detail": f"A session with deduplicationKey {session.deduplication_key!r} already "
            f"exists in this memory space ({session.uuid}); reuse it or pick another key.",
            "errorName": "SessionDeduplicationConflict",
            "deduplicationKey": session.deduplication_key,
            "existingSessionId": str(session.uuid),
            "existingSessionUrl": url,
        },
        {"Location": url},
    )


def create_session(request: HttpRequest, principal: Principal, sp: str) -> HttpResponseBase:
    """POST ``{sp}/sessions/``: 201 with version 1; 409 on a live duplicate key."""
    data = json_body(request)
    body = validate(schemas.SessionCreate, data)
    space = owned_space(principal, sp)
    strategies = body.lifecycleStrategies or []
    _strategies_allowed(strategies, None, "lifecycleStrategies")
    raw_strategies = data.get("lifecycleStrategies") or [dict(schemas.SERVER_DEFAULT_STRATEGY)]
    key = body.deduplicationKey

    try:
        with transaction.atomic():
            session = EmulatedSession.objects.create(
                space=space,
                participant=body.participants[0],
                description=body.description,
                metadata=data.get("metadata"),
                deduplication_key=key,
                lifecycle_strategies=raw_strategies,
                created_at=timezone.now(),
            )
    except IntegrityError:
        existing = EmulatedSession.objects.filter(
            space=space, deduplication_key=key, deleted_at__isnull=True
        ).first()
        if key is None or existing is None:  # pragma: no cover - no other constraint can fail
            raise
        raise _session_conflict(existing, space) from None
    return JsonResponse(render_session(session, space), status=201)


def list_sessions(request: HttpRequest, principal: Principal, sp: str) -> HttpResponseBase:
    """GET ``{sp}/sessions/``: description, participants and key filters (AND), paged."""
    offset, limit = page_params(request)
    description = query_text(request, "description")
    if description is not None and len(description) < 3:
        raise invalid(
            ["query", "description"],
            "String should have at least 3 characters",
            description,
            kind="string_too_short",
        )
    participants = query_texts(request, "participants")
    for participant in participants:
        if not _is_object_id(participant):
            raise bad_request(
                f"participants filter {participant!r} is not a valid ObjectId; send 24 "
                "hexadecimal characters."
            )
    key = query_text(request, "deduplicationKey")
    space = owned_space(principal, sp)
    sessions = EmulatedSession.objects.filter(space=space, deleted_at__isnull=True)
    if description is not None and len(description) > schemas.MAX_SESSION_DESCRIPTION:
        # No stored description is that long; SQLite would also refuse the LIKE pattern (500).
        sessions = sessions.none()
    elif description is not None:
        # icontains escapes % and _, so the needle is a literal, case-insensitive substring.
        sessions = sessions.filter(description__icontains=description)
    if participants:
        sessions = sessions.filter(participant__in=set(participants))
    if key is not None:
        sessions = sessions.filter(deduplication_key=key)
    total = sessions.count()
    window = sessions.order_by("pk")[offset : offset + limit] if offset < total else []
    items = [render_session(session, space) for session in window]
    return JsonResponse({"items": items, "total": total})


def _is_object_id(value: Any) -> bool:
    return (
        isinstance(value, str)
        and len(value) == 24
        and all(ch in "0123456789abcdefABCDEF" for ch in value)
    )


def get_session(request: HttpRequest, principal: Principal, sp: str, ss: str) -> HttpResponseBase:
    """GET ``{sp}/sessions/{ss}/``: 200 with the session, 404 if gone or foreign."""
    space = owned_space(principal, sp)
    return JsonResponse(render_session(live_session(space, ss), space))


def _if_match(request: HttpRequest) -> int | None:
    """The version in ``If-Match`` (bare, quoted or weak); ``None`` when absent or ``*``."""
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    value = raw.strip()
    if value == "*":
        return None
    if value.startswith("W/"):
        value = value[2:]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    try:
        if not value.isascii() or not value.isdigit():
            raise ValueError(value)
        return int(value)  # ValueError beyond int()'s 4300-digit limit
    except ValueError:
        raise invalid(
            ["header", "If-Match"],
            "If-Match must be the session version as a decimal integer, e.g. 'If-Match: 3'.",
            raw,
        ) from None


def patch_session(request: HttpRequest, principal: Principal, sp: str, ss: str) -> HttpResponseBase:
    """PATCH ``{sp}/sessions/{ss}/``: guarded by ``If-Match``; +1 version per change."""
    data = json_body(request)
    body = validate(schemas.SessionPatch, data)
    expected = _if_match(request)
    with transaction.atomic():
        space = owned_space(principal, sp)
        session = live_session(space, ss, lock=True)
        if expected is not None and expected != session.version:
            raise _version_mismatch(expected, session.version)
        known = body.model_fields_set & {"metadata", "description", "lifecycleStrategies"}
        if not known:
            return JsonResponse(render_session(session, space))
        changes: dict[str, Any] = {}
        if "metadata" in known:
            changes["metadata"] = data["metadata"]
        if "description" in known:
            changes["description"] = body.description
        if "lifecycleStrategies" in known:
            _strategies_allowed(
                body.lifecycleStrategies, session.lifecycle_strategies, "lifecycleStrategies"
            )
            changes["lifecycle_strategies"] = data["lifecycleStrategies"]
        updated = EmulatedSession.objects.filter(pk=session.pk, version=session.version).update(
            version=F("version") + 1, **changes
        )
        if not updated:  # pragma: no cover - only on databases without row locks
            raise _version_mismatch(session.version, session.version + 1)
        session.refresh_from_db()
    return JsonResponse(render_session(session, space))


def _version_mismatch(expected: int, current: int) -> HTTPError:
    return HTTPError(
        409,
        {
            "detail": f"Session version mismatch: expected {expected}, current {current}. "
            "Re-read the session and retry with its current version in If-Match."
        },
    )


def delete_session(
    request: HttpRequest, principal: Principal, sp: str, ss: str
) -> HttpResponseBase:
    """DELETE ``{sp}/sessions/{ss}/``: soft delete (frees the key, hides events)."""
    with transaction.atomic():
        space = owned_space(principal, sp)
        session = live_session(space, ss, lock=True)
        EmulatedSession.objects.filter(pk=session.pk).update(deleted_at=timezone.now())
    return no_content()
