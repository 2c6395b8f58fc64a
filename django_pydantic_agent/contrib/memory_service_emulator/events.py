"""Handlers for events: per-session sequence ids, ``createdAt`` tokens, atomic batches."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import F
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.utils import timezone

from django_pydantic_agent.contrib.memory_service_emulator import schemas
from django_pydantic_agent.contrib.memory_service_emulator.models import (
    EmulatedEvent,
    EmulatedSession,
)
from django_pydantic_agent.contrib.memory_service_emulator.protocol import (
    MAX_SEQUENCE_ID,
    HTTPError,
    Principal,
    bad_request,
    invalid,
    json_body,
    live_events,
    live_session,
    no_content,
    not_found_error,
    owned_space,
    page_params,
    query_int,
    query_text,
    render_event,
    timestamp,
    validate,
)

# --------------------------------------------------------------------------- events


def _check_emitter(emitter: schemas.Emitter, session: EmulatedSession, where: str) -> None:
    """400 unless a user emitter carries an id that is a participant (agents pass freely)."""
    if emitter.type != "user":
        return
    if emitter.id is None:
        raise bad_request(
            f"{where}: a user emitter needs an id; send emitter.id set to one of the session "
            f"participants {[session.participant]!r}."
        )
    if emitter.id != session.participant:
        raise bad_request(
            f"{where}: emitter id {emitter.id!r} is not a participant of session "
            f"{str(session.uuid)!r}; user events must come from one of {[session.participant]!r}."
        )


def _allocate(session: EmulatedSession, count: int) -> int:
    """Reserve ``count`` sequence ids (inside atomic); returns the first one."""
    EmulatedSession.objects.filter(pk=session.pk).update(
        last_sequence_id=F("last_sequence_id") + count
    )
    last = EmulatedSession.objects.values_list("last_sequence_id", flat=True).get(pk=session.pk)
    return last - count + 1


def _new_event(
    session: EmulatedSession, item: schemas.EventCreate, raw: dict[str, Any], seq: int
) -> EmulatedEvent:
    return EmulatedEvent(
        session=session,
        sequence_id=seq,
        event_type=item.type,
        body=raw["body"],
        emitter_type=item.emitter.type,
        emitter_id=item.emitter.id,
        created_at=timezone.now(),
    )


def create_event(request: HttpRequest, principal: Principal, sp: str, ss: str) -> HttpResponseBase:
    """POST ``.../events/``: 201 with the next sequence id and a fresh token."""
    data = json_body(request)
    item = validate(schemas.EventCreate, data)
    with transaction.atomic():
        session = live_session(owned_space(principal, sp), ss, lock=True)
        _check_emitter(item.emitter, session, "emitter")
        event = _new_event(session, item, data, _allocate(session, 1))
        event.save()
    return JsonResponse(render_event(event), status=201)


def create_events(request: HttpRequest, principal: Principal, sp: str, ss: str) -> HttpResponseBase:
    """POST ``.../events/batch/``: all or nothing, consecutive ids in input order."""
    data = json_body(request)
    batch = validate(schemas.EventCreateBatch, data)
    with transaction.atomic():
        session = live_session(owned_space(principal, sp), ss, lock=True)
        for index, item in enumerate(batch.events):
            _check_emitter(item.emitter, session, f"events[{index}].emitter")
        events: list[EmulatedEvent] = []
        if batch.events:
            first = _allocate(session, len(batch.events))
            events = [
                _new_event(session, item, raw, first + index)
                for index, (item, raw) in enumerate(zip(batch.events, data["events"], strict=True))
            ]
            EmulatedEvent.objects.bulk_create(events)
    return JsonResponse({"items": [render_event(event) for event in events]}, status=201)


def list_events(request: HttpRequest, principal: Principal, sp: str, ss: str) -> HttpResponseBase:
    """GET ``.../events/``: ``offset``/``limit`` pages or the ``lastN`` tail, ascending."""
    last_n = query_int(request, "lastN", low=1, high=100)
    if last_n is not None and "offset" in request.GET:
        raise invalid(
            ["query", "lastN"],
            "lastN and offset are mutually exclusive; send lastN alone for the tail, or "
            "offset and limit for a page.",
            request.GET["lastN"],
        )
    offset, limit = page_params(request)
    event_type = query_text(request, "eventType")
    if event_type is not None and event_type not in ("message", "tool_output", "status"):
        raise invalid(
            ["query", "eventType"],
            "Input should be 'message', 'tool_output' or 'status'",
            event_type,
            kind="literal_error",
        )
    session = live_session(owned_space(principal, sp), ss)
    events = live_events(session)
    if event_type is not None:
        events = events.filter(event_type=event_type)
    total = events.count()
    if last_n is not None:
        page = list(events.order_by("-sequence_id")[:last_n])[::-1]
    elif offset < total:
        page = list(events.order_by("sequence_id")[offset : offset + limit])
    else:
        page = []
    return JsonResponse({"items": [render_event(event) for event in page], "total": total})


def _parse_token(token: str, loc: list[str | int]) -> dt.datetime:
    """Parse a ``createdAt`` token (``Z`` or offset, a space standing for a decoded ``+``)."""
    date_part, sep, time_part = token.strip().partition("T")
    text = date_part + sep + time_part.replace(" ", "+")
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise invalid(
            loc,
            "createdAt must be an ISO-8601 timestamp as returned in the event's createdAt.",
            token,
            kind="datetime_parsing",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        return parsed.astimezone(dt.UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise invalid(
            loc,
            "createdAt is outside the years 1-9999 once converted to UTC; send the token as "
            "returned in the event's createdAt.",
            token,
            kind="datetime_parsing",
        ) from None


def _next_token(previous: dt.datetime) -> dt.datetime:
    return max(timezone.now(), previous + dt.timedelta(microseconds=1))


def _apply_event_patch(
    session: EmulatedSession,
    seq: int,
    patch: schemas.EventPatch,
    raw: dict[str, Any],
    token: dt.datetime | None,
    where: str,
) -> EmulatedEvent:
    """Apply one patch inside the caller's transaction; raises 404, 422 or 400."""
    event = (
        live_events(session).select_for_update().filter(sequence_id=seq).first()
        if seq <= MAX_SEQUENCE_ID
        else None
    )
    if event is None:
        raise not_found_error(
            f"{where}: event {seq!r} was not found in session {str(session.uuid)!r}."
        )
    if token is not None and token != event.created_at:
        raise _stale(seq, token, event.created_at)
    if patch.emitter is not None:
        _check_emitter(patch.emitter, session, f"{where}.emitter")
        event.emitter_type = patch.emitter.type
        event.emitter_id = patch.emitter.id
    if patch.body is not None:
        event.body = raw["body"]
    if patch.type is not None:
        event.event_type = patch.type
    previous = event.created_at
    event.created_at = _next_token(previous)
    updated = EmulatedEvent.objects.filter(pk=event.pk, created_at=previous).update(
        body=event.body,
        emitter_type=event.emitter_type,
        emitter_id=event.emitter_id,
        event_type=event.event_type,
        created_at=event.created_at,
    )
    if not updated:  # pragma: no cover - only on databases without row locks
        raise _stale(seq, previous, event.created_at)
    return event


def _stale(seq: int, sent: dt.datetime, current: dt.datetime) -> HTTPError:
    return HTTPError(
        422,
        {
            "detail": f"Patch of incorrect version of event {seq}: createdAt "
            f"{timestamp(sent)} is not the current {timestamp(current)}; "
            "re-read the event and retry with its fresh createdAt."
        },
    )


def patch_event(
    request: HttpRequest, principal: Principal, sp: str, ss: str, seq: int
) -> HttpResponseBase:
    """PATCH ``.../events/{seq}/``: guarded by ``?createdAt``; answers a new token."""
    raw_token = query_text(request, "createdAt")
    token = None if raw_token is None else _parse_token(raw_token, ["query", "createdAt"])
    data = json_body(request)
    patch = validate(schemas.EventPatch, data)
    with transaction.atomic():
        session = live_session(owned_space(principal, sp), ss, lock=True)
        event = _apply_event_patch(session, seq, patch, data, token, "event")
    return JsonResponse(render_event(event))


def patch_events(request: HttpRequest, principal: Principal, sp: str, ss: str) -> HttpResponseBase:
    """PATCH ``.../events/batch/``: all or nothing; items answer in input order."""
    data = json_body(request)
    batch = validate(schemas.EventPatchBatch, data)
    tokens = [
        None
        if item.createdAt is None
        else _parse_token(item.createdAt, ["body", "events", index, "createdAt"])
        for index, item in enumerate(batch.events)
    ]
    with transaction.atomic():
        session = live_session(owned_space(principal, sp), ss, lock=True)
        events = [
            _apply_event_patch(session, item.sequenceId, item, raw, token, f"events[{index}]")
            for index, (item, raw, token) in enumerate(
                zip(batch.events, data["events"], tokens, strict=True)
            )
        ]
    return JsonResponse({"items": [render_event(event) for event in events]})


def delete_event(
    request: HttpRequest, principal: Principal, sp: str, ss: str, seq: int
) -> HttpResponseBase:
    """DELETE ``.../events/{seq}/``: soft delete; the sequence id is never reused."""
    with transaction.atomic():
        session = live_session(owned_space(principal, sp), ss, lock=True)
        deleted = (
            live_events(session).filter(sequence_id=seq).update(deleted_at=timezone.now())
            if seq <= MAX_SEQUENCE_ID
            else 0
        )
        if not deleted:
            raise not_found_error(f"Event {seq!r} was not found in session {ss!r}.")
    return no_content()
