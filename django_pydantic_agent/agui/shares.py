"""Share links: the owner's routes, and the public link (``persistence.sharing`` keeps them).

Mounted when ``ShareOptions.enabled`` and the conversation store keeps share links
(``StoreFeatures.share``). The owner's routes run under the server's access policy (login,
CSRF) and are owner-scoped: another owner's thread is the same 404 as a missing one.

- ``POST threads/<id>/share/`` ``{"expiresIn": <seconds>, "includeAttachments": <bool>}``
  snapshots the active branch and answers 201 ``{"url", "expiresAt", ...}``: the only time the
  link is shown, since the store keeps only its token's digest. A thread has one live link;
  sharing it again replaces it.
- ``GET threads/<id>/share/`` the live link (no URL), ``DELETE`` revokes it; ``GET shares/``
  lists the caller's live links.

The link, ``GET shared/<token>/``, needs no login: the token is the credential. It answers the
snapshot as JSON, or as the page ``ShareOptions.page`` renders for a client that prefers HTML;
``shared/<token>/attachments/<id>/`` serves a file the snapshot quotes, only when the owner
included them. Nothing else is reachable from a link. Every answer of the two public routes is
``noindex``, ``no-referrer`` and ``no-store``, and they are throttled per client in Django's
cache.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, TypeAlias

from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.utils import timezone

from django_pydantic_agent.agui.access import AccessPolicy, is_async_callable
from django_pydantic_agent.agui.attachments import download_response
from django_pydantic_agent.agui.branches import ActiveRun
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import declared_length, read_json_object
from django_pydantic_agent.agui.options import check_callable, check_flag, check_positive
from django_pydantic_agent.agui.owners import owner_request, owns_nothing
from django_pydantic_agent.agui.threads import NOT_FOUND, stored_thread
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.persistence import AttachmentStore, ConversationStore, is_persistent
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.sharing import (
    SharedThread,
    ShareLink,
    is_share_token,
    new_share_token,
    share_digest,
    shared_attachment_ids,
    snapshot_messages,
)

__all__ = [
    "LINK_GONE",
    "MIN_EXPIRY",
    "NO_LINK",
    "PUBLIC_HEADERS",
    "SHARE_BUSY",
    "SHARE_TOO_BIG",
    "ShareEndpoints",
    "ShareOptions",
    "SharedPage",
]

#: ``page(request, shared)``: the HTML of a link (``shared`` is the JSON the link answers,
#: ``None`` for a link that is gone, answered 404); sync or async, returns the response.
SharedPage: TypeAlias = Callable[
    [HttpRequest, "dict[str, Any] | None"], "HttpResponseBase | Awaitable[HttpResponseBase]"
]

#: The shortest expiry a link may have.
MIN_EXPIRY: Final = timedelta(minutes=1)
#: The headers of every answer of a link: not indexed, not leaked to the sites it links to
#: (the token is in its URL), never cached.
PUBLIC_HEADERS: Final = {
    "X-Robots-Tag": "noindex, nofollow",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
#: The 404 of a link that is not live.
LINK_GONE = "No such share link: it was revoked, it expired, or it never existed."
#: The 404 of ``GET threads/<id>/share/`` for a thread without a live link.
NO_LINK = "This thread has no live share link; POST to this route to make one."
#: The 409 of a share while a run streams on the thread.
SHARE_BUSY = "A run is streaming on this thread; share it once the answer has finished."
#: What the 413 of ``POST threads/<id>/share/`` asks the caller to send instead.
SHARE_TOO_BIG = 'send only {"expiresIn": <seconds>, "includeAttachments": <bool>}.'
_ATTACHMENT_GONE = "No such attachment on this share link."
_NOT_AN_OBJECT = (
    'Send a JSON object such as {"expiresIn": 86400, "includeAttachments": false}, or no body '
    "for the defaults."
)
#: Links that can be opened from a browser, logged in or not.
_PUBLIC = AccessPolicy(require_authenticated=False, csrf_exempt=True)


def _days(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day{'s' if days != 1 else ''}"
    return f"{seconds} seconds"


@dataclass(frozen=True, kw_only=True)
class ShareOptions:
    """Share links on a mount (``AGUIServer(shares=ShareOptions(...))``).

    Raises ``TypeError``/``ValueError`` naming a wrong value.
    """

    #: Whether the share routes are mounted (on a store that keeps share links).
    enabled: bool = True
    #: How long a link lives when the owner does not say.
    default_expiry: timedelta = timedelta(days=7)
    #: The longest life an owner may give a link (``expiresIn`` over it is a 400).
    max_expiry: timedelta = timedelta(days=30)
    #: The HTML of a link for a client that prefers HTML (``SharedPage``), such as
    #: ``contrib.chat``'s ``shared_page``; ``None``: the link answers JSON only.
    page: SharedPage | None = None
    #: Link requests one client may make per window (both public routes count); ``0`` turns
    #: the throttle off.
    open_limit: int = 60
    #: The throttle's window, in seconds.
    open_window_seconds: float = 60.0
    #: ``client_key(request)``: who a request counts against, a string (sync, cheap); ``None``:
    #: ``REMOTE_ADDR`` (behind a proxy, set it from the forwarded address first).
    client_key: Callable[[HttpRequest], str] | None = None

    def __post_init__(self) -> None:
        check_flag("enabled", self.enabled)
        for name in ("default_expiry", "max_expiry"):
            value = getattr(self, name)
            if not isinstance(value, timedelta):
                raise TypeError(
                    f"{name}={value!r} is not a timedelta; pass for example timedelta(days=7)."
                )
            if value < MIN_EXPIRY:
                raise ValueError(f"{name}={value!r} is shorter than a minute; pass a longer one.")
        if self.default_expiry > self.max_expiry:
            raise ValueError(
                f"default_expiry={self.default_expiry!r} exceeds max_expiry={self.max_expiry!r}; "
                "pass a default no longer than the maximum."
            )
        check_callable("page", self.page)
        check_callable("client_key", self.client_key)
        if isinstance(self.open_limit, bool) or not isinstance(self.open_limit, int):
            raise TypeError(
                f"open_limit={self.open_limit!r} is not a whole number; pass 0 or more."
            )
        if self.open_limit < 0:
            raise ValueError(f"open_limit={self.open_limit!r} is negative; pass 0 (off) or more.")
        check_positive("open_window_seconds", self.open_window_seconds)

    def expiry_choices(self) -> list[int]:
        """Lifetimes a page may offer, in seconds: a day, a week, 30 and 90 days up to the
        maximum, and the maximum itself."""
        top = int(self.max_expiry.total_seconds())
        steps = [86400, 7 * 86400, 30 * 86400, 90 * 86400]
        return [*(s for s in steps if s < top), top]


def _link_json(link: ShareLink) -> dict[str, Any]:
    return {
        "threadId": link.thread_id,
        "title": link.title,
        "createdAt": link.created_at.isoformat(),
        "expiresAt": link.expires_at.isoformat(),
        "includeAttachments": link.include_attachments,
    }


def _public(response: HttpResponseBase) -> HttpResponseBase:
    for name, value in PUBLIC_HEADERS.items():
        response[name] = value
    return response


def _gone(message: str = LINK_GONE) -> Refusal:
    return Refusal(404, message, headers=dict(PUBLIC_HEADERS))


class ShareEndpoints:
    """The share routes over one conversation store (and the attachment store whose files a
    link may serve); ``active_run`` and ``settle`` as for ``ThreadEndpoints``."""

    def __init__(
        self,
        store: ConversationStore,
        *,
        attachment_store: AttachmentStore | None,
        options: ShareOptions,
        namespace: str,
        body_limit: Callable[[], int],
        active_run: ActiveRun | None = None,
        settle: Callable[[HttpRequest, str | None], Awaitable[None]] | None = None,
    ) -> None:
        self._store: Any = store
        self._uploads = attachment_store
        self._options = options
        self._namespace = namespace
        self._body_limit = body_limit
        self._active_run = active_run
        self._settle = settle

    @property
    def mounted(self) -> bool:
        """Whether the routes are mounted: enabled, on a store that keeps share links."""
        store = self._store
        return self._options.enabled and is_persistent(store) and store_features(store).share

    def routes(self) -> list[Route]:
        """``shares/``, ``threads/<id>/share/`` and the public ``shared/<token>/`` (with its
        ``attachments/<id>/`` when the mount keeps uploads)."""
        mounted = self.mounted
        return [
            Route(path="shares/", name="shares", handlers={"GET": self.index}, mounted=mounted),
            Route(
                path="threads/<str:thread_id>/share/",
                name="thread-share",
                handlers={"GET": self.get, "POST": self.create, "DELETE": self.revoke},
                not_found=NOT_FOUND,
                too_big=SHARE_TOO_BIG,
                mounted=mounted,
            ),
            Route(
                path="shared/<str:token>/",
                name="shared",
                handlers={"GET": self.open},
                not_found=LINK_GONE,
                access=_PUBLIC,
                mounted=mounted,
            ),
            Route(
                path="shared/<str:token>/attachments/<str:attachment_id>/",
                name="shared-attachment",
                handlers={"GET": self.attachment},
                not_found=_ATTACHMENT_GONE,
                access=_PUBLIC,
                store="attachment",
                mounted=mounted and self._uploads is not None,
            ),
        ]

    # The owner's routes -----------------------------------------------------------------

    def _read(self, request: HttpRequest) -> tuple[timedelta, bool]:
        """The expiry and attachment choice of a share's body (none: the defaults)."""
        if not declared_length(request):
            return self._options.default_expiry, False
        payload = read_json_object(
            request, limit=self._body_limit(), too_big=SHARE_TOO_BIG, not_object=_NOT_AN_OBJECT
        )
        unknown = sorted(set(payload) - {"expiresIn", "includeAttachments"})
        if unknown:
            raise Refusal.invalid(request, f'Unknown field "{unknown[0]}"; {SHARE_TOO_BIG}')
        longest = self._options.max_expiry
        seconds = payload.get("expiresIn")
        expiry = self._options.default_expiry
        if seconds is not None:
            top = int(longest.total_seconds())
            low = int(MIN_EXPIRY.total_seconds())
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int)
                or not low <= seconds <= top
            ):
                raise Refusal.invalid(
                    request,
                    f'"expiresIn" must be a whole number of seconds from {low} to {top} '
                    f"({_days(longest)}), or left out for {_days(expiry)}.",
                )
            expiry = timedelta(seconds=seconds)
        include = payload.get("includeAttachments", False)
        if not isinstance(include, bool):
            raise Refusal.invalid(request, '"includeAttachments" must be true or false.')
        if include and self._uploads is None:
            raise Refusal.invalid(
                request,
                "This endpoint keeps no uploads, so a link has no attachments to include; "
                'leave "includeAttachments" out.',
            )
        return expiry, include

    async def _check_thread(self, request: HttpRequest, thread_id: str) -> None:
        """404 unless the caller has the thread."""
        store = self._store
        if await owns_nothing(request, store) or not await store.exists(thread_id, request=request):
            raise Refusal(404, NOT_FOUND)

    async def create(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``POST threads/<id>/share/``: 201 ``{"url", "expiresAt", "createdAt", "threadId",
        "title", "includeAttachments"}``; 400 for a bad body, 404 for a missing (or a
        stranger's) thread, 409 while a run streams on it, 413/415 for the body."""
        expiry, include = self._read(request)
        store = self._store
        if await owns_nothing(request, store):
            raise Refusal(404, NOT_FOUND)
        if self._settle is not None:
            await self._settle(request, thread_id)
        if self._active_run is not None and await self._active_run(request, thread_id):
            raise Refusal(409, SHARE_BUSY)
        messages = await stored_thread(store, thread_id, request=request)
        if messages is None:
            raise Refusal(404, NOT_FOUND)
        token = new_share_token()
        link = await store.share(
            thread_id,
            digest=share_digest(token),
            messages=snapshot_messages(messages, include_attachments=include),
            expires_at=timezone.now() + expiry,
            include_attachments=include,
            request=request,
        )
        if link is None:  # deleted meanwhile
            raise Refusal(404, NOT_FOUND)
        url = request.build_absolute_uri(self._link_path(request, token, route=3))
        return JsonResponse({"url": url, **_link_json(link)}, status=201)

    async def get(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``GET threads/<id>/share/``: 200 the thread's live link (``{"threadId", "title",
        "createdAt", "expiresAt", "includeAttachments"}``, never its URL), 404 without one or
        for a missing (or a stranger's) thread."""
        await self._check_thread(request, thread_id)
        links = await self._store.share_links(request=request, thread_id=thread_id)
        if not links:
            raise Refusal(404, NO_LINK)
        return JsonResponse(_link_json(links[0]))

    async def revoke(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``DELETE threads/<id>/share/``: 204, the thread's link no longer opens (whether or
        not it had one); 404 for a missing (or a stranger's) thread."""
        await self._check_thread(request, thread_id)
        await self._store.unshare(thread_id, request=request)
        return HttpResponse(status=204)

    async def index(self, request: HttpRequest) -> HttpResponseBase:
        """``GET shares/``: 200 ``{"shares": [...]}``, the caller's live links, newest first."""
        if await owns_nothing(request, self._store):
            return JsonResponse({"shares": []})
        links = await self._store.share_links(request=request)
        return JsonResponse({"shares": [_link_json(link) for link in links]})

    # The public link --------------------------------------------------------------------

    @staticmethod
    def _link_path(request: HttpRequest, token: str, *, route: int) -> str:
        """The link's path on the mount that answers ``request``: the request's path less its
        ``route`` segments (3 for ``threads/<id>/share/``, 2 for ``shared/<token>/``), then
        ``shared/<token>/``."""
        segments = request.path.rstrip("/").split("/")
        return "/".join([*segments[:-route], "shared", token]) + "/"

    async def _throttle(self, request: HttpRequest) -> None:
        """A 429 with ``Retry-After`` once the client made ``open_limit`` link requests in
        this window (a fixed window per client and mount namespace, counted in the default
        cache)."""
        limit = self._options.open_limit
        if not limit:
            return
        window = self._options.open_window_seconds
        key_of = self._options.client_key
        client = key_of(request) if key_of is not None else request.META.get("REMOTE_ADDR", "")
        slot, elapsed = divmod(time.time(), window)
        digest = hashlib.sha256(str(client).encode()).hexdigest()[:32]
        key = f"django_pydantic_agent:shared:{self._namespace}:{digest}:{int(slot)}"
        timeout = math.ceil(window) + 1
        await cache.aadd(key, 0, timeout=timeout)
        try:
            count = await cache.aincr(key)
        except ValueError:  # the window's key expired between the two calls
            await cache.aset(key, 1, timeout=timeout)
            count = 1
        if count > limit:
            seconds = max(1, math.ceil(window - elapsed))
            raise Refusal(
                429,
                f"Too many requests for share links: retry in {seconds} second"
                f"{'s' if seconds != 1 else ''}.",
                headers={"Retry-After": str(seconds), **PUBLIC_HEADERS},
            )

    async def _find(self, request: HttpRequest, token: str) -> SharedThread | None:
        await self._throttle(request)
        if not is_share_token(token):
            return None
        shared: SharedThread | None = await self._store.open_shared(share_digest(token))
        return shared

    def _wants_html(self, request: HttpRequest) -> bool:
        """A page is configured and the client prefers HTML to JSON (a browser: ``*/*``
        alone, or ``?format=json``, is JSON)."""
        if self._options.page is None or request.GET.get("format") == "json":
            return False
        return request.get_preferred_type(["application/json", "text/html"]) == "text/html"

    async def _page(self, request: HttpRequest, shared: dict[str, Any] | None) -> HttpResponseBase:
        page = self._options.page
        assert page is not None  # _wants_html
        if is_async_callable(page):
            response = await page(request, shared)  # type: ignore[misc]
        else:
            response = await sync_to_async(page)(request, shared)
        if shared is None:
            response.status_code = 404
        response["Vary"] = "Accept"
        return _public(response)

    async def open(self, request: HttpRequest, token: str) -> HttpResponseBase:
        """``GET shared/<token>/``: 200 ``{"title", "messages", "sharedAt", "expiresAt",
        "attachmentsUrl"}`` (``attachmentsUrl``: where the snapshot's files are, ``null``
        unless included), or the page; 404 for a link that is not live; 429 throttled."""
        shared = await self._find(request, token)
        if shared is None:
            if self._wants_html(request):
                return await self._page(request, None)
            raise _gone()
        files = None
        if shared.include_attachments and self._uploads is not None:
            files = f"{self._link_path(request, token, route=2)}attachments/"
        body = {
            "title": shared.title,
            "messages": shared.messages,
            "sharedAt": shared.created_at.isoformat(),
            "expiresAt": shared.expires_at.isoformat(),
            "attachmentsUrl": files,
        }
        if self._wants_html(request):
            return await self._page(request, body)
        response = JsonResponse(body)
        response["Vary"] = "Accept"
        return _public(response)

    async def attachment(
        self, request: HttpRequest, token: str, attachment_id: str
    ) -> HttpResponseBase:
        """``GET shared/<token>/attachments/<id>/``: a file the snapshot quotes, as a forced
        download, when the owner included the files; else 404 (429 throttled)."""
        shared = await self._find(request, token)
        if (
            shared is None
            or not shared.include_attachments
            or attachment_id not in shared_attachment_ids(shared.messages)
        ):
            raise _gone(_ATTACHMENT_GONE)
        uploads = self._uploads
        assert uploads is not None  # the route is mounted only with an attachment store
        try:
            owner = await owner_request(shared.owner_id)
        except (ObjectDoesNotExist, ValidationError, ValueError, TypeError):  # the owner is gone
            raise _gone(_ATTACHMENT_GONE) from None
        opened = await uploads.open(attachment_id, request=owner)
        if opened is None:
            raise _gone(_ATTACHMENT_GONE)
        return _public(download_response(request, opened))
