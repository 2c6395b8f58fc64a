"""What a caller is told when something fails: store refusals, and redacted ``RUN_ERROR`` text.

Two rules live here, each written once. A store's deliberate refusal (``StoreError``) is
described by ``describe_store_refusal``: ``AnonymousOperationError`` is 403, ``StoreLimitError``
413 and any other ``StoreError`` 409, with the store's own message (written for the caller), or
a fixed sentence for an anonymous visitor. Before a stream starts it is answered as JSON
(``Refusal.of_store``); once one has started, as a ``RUN_ERROR`` (``store_refusal_event``). Every
other failure reaches the client through ``redact_run_error``: its text only when the server
exposes error messages, else a generic sentence (the real exception is logged by the caller).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

from ag_ui.core import RunErrorEvent
from django.http import HttpRequest, HttpResponse, JsonResponse

from django_pydantic_agent.persistence import AnonymousOperationError, StoreError, StoreLimitError

__all__ = [
    "REDACTED_RUN_ERROR",
    "REDACTED_SAVE_ERROR",
    "STORE_FAILED_CODE",
    "STORE_LIMIT_CODE",
    "STORE_REFUSED_CODE",
    "Refusal",
    "StoreKind",
    "StoreRefusal",
    "describe_store_refusal",
    "logged_path",
    "redact_run_error",
    "run_error",
    "store_refusal_event",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: The ``RUN_ERROR`` message a client sees unless the server exposes error messages.
REDACTED_RUN_ERROR = "The agent run failed. The error has been logged on the server."
#: The message of a ``STORE_FAILED`` ``RUN_ERROR`` unless the server exposes error messages.
REDACTED_SAVE_ERROR = (
    "The run could not be stored, so the agent did not run. The error has been logged on the "
    "server."
)

#: ``RUN_ERROR`` codes the run endpoint sets itself, when the store refused or failed a run.
STORE_LIMIT_CODE = "STORE_LIMIT"
STORE_REFUSED_CODE = "STORE_REFUSED"
STORE_FAILED_CODE = "STORE_FAILED"

#: Which kind of store refused, as named in the 403 text.
StoreKind = Literal["conversation", "attachment"]


@dataclass(frozen=True, kw_only=True)
class StoreRefusal:
    """How a store's refusal is answered: an HTTP status and a message safe to show."""

    status: int
    message: str


def logged_path(request: HttpRequest) -> str:
    """``request.path`` for a log line: as is when printable, else its ``repr`` (no newlines)."""
    path = request.path
    return path if path.isprintable() else repr(path)


class Refusal(Exception):
    """A request refused before anything streams: its HTTP ``status``, the sentence the
    caller reads (``message``), the answer's headers and extra JSON ``fields``. Every route
    raises it, and one place answers it (``views.AGUIView``), as ``response()``:
    ``{"error": message, **fields}``. Another transport renders it its own way.

    ``logged``: the refusal was logged already (one line), so Django's request logger must not
    log the answer again.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        fields: dict[str, Any] | None = None,
        logged: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.fields = dict(fields or {})
        self.logged = logged

    @classmethod
    def invalid(cls, request: HttpRequest, message: str) -> Refusal:
        """A 400 for bad input, logged now as exactly one ``WARNING`` line (never a traceback:
        a client's bad input is not a server fault). ``message`` names the problem without
        echoing the payload."""
        logger.warning("Refused %s %s with 400: %s", request.method, logged_path(request), message)
        return cls(400, message, logged=True)

    @classmethod
    def of(cls, response: HttpResponse) -> Refusal:
        """The refusal a JSON error answer (``{"error", ...}``) stands for."""
        body = json.loads(response.content)
        message = str(body.pop("error", ""))
        headers = {name: response[name] for name in ("Retry-After",) if response.has_header(name)}
        logged = bool(getattr(response, "_has_been_logged", False))
        return cls(response.status_code, message, headers=headers, fields=body, logged=logged)

    @classmethod
    def of_store(cls, exc: StoreError, *, store: StoreKind) -> Refusal:
        """The refusal of a store's ``StoreError`` (see ``describe_store_refusal``)."""
        refusal = describe_store_refusal(exc, store=store)
        return cls(refusal.status, refusal.message)

    def response(self) -> JsonResponse:
        """The JSON answer: ``{"error": message, **fields}`` with the status and headers."""
        response = JsonResponse({"error": self.message, **self.fields}, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        if self.logged:
            response._has_been_logged = True  # type: ignore[attr-defined]
        return response


def describe_store_refusal(exc: StoreError, *, store: StoreKind) -> StoreRefusal:
    """The answer to a store's deliberate refusal; nothing was written.

    ``AnonymousOperationError`` is a 403 with a fixed sentence naming the kind of ``store``;
    ``StoreLimitError`` a 413 and any other ``StoreError`` a 409, both with the store's message
    (store messages are written for the caller and name no other owner).
    """
    if isinstance(exc, AnonymousOperationError):
        return StoreRefusal(
            status=403, message=f"This agent's {store} store does not serve anonymous visitors."
        )
    if isinstance(exc, StoreLimitError):
        return StoreRefusal(status=413, message=str(exc))
    return StoreRefusal(status=409, message=str(exc))


def store_refusal_event(exc: StoreError, *, store: StoreKind) -> RunErrorEvent:
    """The ``RUN_ERROR`` for a store's refusal once a stream started.

    The message is ``describe_store_refusal``'s; the code is ``STORE_LIMIT`` for a limit (the
    413 case) and ``STORE_REFUSED`` for any other refusal.
    """
    refusal = describe_store_refusal(exc, store=store)
    code = STORE_LIMIT_CODE if refusal.status == 413 else STORE_REFUSED_CODE
    return RunErrorEvent(message=refusal.message, code=code)


def redact_run_error(
    event: RunErrorEvent, *, expose: bool, redacted: str = REDACTED_RUN_ERROR
) -> RunErrorEvent:
    """``event`` as the client may see it: unchanged when ``expose``, else with ``redacted`` text.

    Every ``RUN_ERROR`` that reports an exception passes through here (the inner agent's, the
    run guard's, a failed save's), so the rule is one line. Its other fields (code, timestamp)
    are kept.
    """
    if expose:
        return event
    return event.model_copy(update={"message": redacted})


def run_error(
    error: BaseException,
    *,
    expose: bool,
    code: str | None = None,
    redacted: str = REDACTED_RUN_ERROR,
) -> RunErrorEvent:
    """The ``RUN_ERROR`` reporting ``error``, passed through ``redact_run_error``."""
    return redact_run_error(
        RunErrorEvent(message=str(error), code=code), expose=expose, redacted=redacted
    )
