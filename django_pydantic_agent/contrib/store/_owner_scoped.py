"""Owner resolution and the worker-thread hop shared by the harness stores."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from asgiref.sync import sync_to_async
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from django_pydantic_agent.persistence.owner import AnonymousOperationError, resolve_owner_id

if TYPE_CHECKING:
    from django.http import HttpRequest

_logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_STORE_APP = "django_pydantic_agent.contrib.store"


class OwnerScoped:
    """Resolves the owner of a request-bound store inside the worker thread.

    ``None`` means "anonymous and not served": the harness capabilities call stores from hooks
    in the middle of a run, so the stores degrade (no-op writes, empty reads) instead of
    raising and aborting the run.
    """

    def __init__(self, request: HttpRequest | None, *, allow_anonymous: bool) -> None:
        if not apps.is_installed(_STORE_APP):
            raise ImproperlyConfigured(
                f"{type(self).__name__} keeps its rows in the models of {_STORE_APP!r}, which "
                f"is not in INSTALLED_APPS: add {_STORE_APP!r} to INSTALLED_APPS and run "
                "migrate, or pass one of the harness's own stores instead."
            )
        self._request = request
        self._allow_anonymous = allow_anonymous
        self._owner_id: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(allow_anonymous={self._allow_anonymous})"

    def _request_owner(self) -> str | None:
        """Synchronous, possibly querying; call it in the worker thread."""
        if self._owner_id is None and self._request is not None:
            try:
                self._owner_id = resolve_owner_id(
                    self._request, allow_anonymous=self._allow_anonymous
                )
            except AnonymousOperationError:
                # No owner id in the message: an anonymous one embeds a session key.
                _logger.debug("%s stores nothing for an unserved anonymous request.", self)
                return None
        return self._owner_id

    def _owner_of(self, path: str) -> str | None:
        """The owner ``path`` belongs to, ``None`` when not served: the request's owner here."""
        return self._request_owner()

    async def _call(self, operation: Callable[[str], _T], default: _T, *, path: str = "") -> _T:
        """One worker-thread hop: ``operation(owner)`` for the owner of ``path``, or ``default``."""

        def run() -> _T:
            owner = self._owner_of(path)
            return default if owner is None else operation(owner)

        return await sync_to_async(run)()
