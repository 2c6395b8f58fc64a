"""The attachment routes: upload one file, download it, delete it.

Mounted only when the server's attachment store persists. An upload must declare its
``Content-Length`` (411 otherwise: Django reads no body without one); a length over the cap is
refused before any parsing, and ``CappedUploadHandler`` stops the multipart parser the moment the
file passes the cap. Under WSGI the rest is then never read. Under ASGI, Django reads the whole
request body before any view runs; only ``BodyLimitMiddleware`` (see
``django_pydantic_agent.agui.asgi``) closes that gap, and the upload view logs a warning once when
it runs under ASGI without it. Downloads are forced (``Content-Disposition: attachment``) and
never sniffed.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from typing import IO, TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import (
    FileResponse,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.http.multipartparser import MultiPartParserError
from django.utils.http import content_disposition_header

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.options import AttachmentOptions
from django_pydantic_agent.agui.owners import ensure_anonymous_session, owns_nothing
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.persistence import AttachmentStore, is_persistent

if TYPE_CHECKING:
    from collections.abc import Sequence

    from django.core.files.uploadedfile import UploadedFile

__all__ = [
    "ATTACHMENT_NOT_FOUND",
    "MULTIPART_OVERHEAD_BYTES",
    "UPLOAD_LIMIT_SCOPE_KEY",
    "AttachmentEndpoints",
    "CappedUploadHandler",
    "safe_filename",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: Allowance for the multipart envelope (boundaries, part headers) on top of the file cap when
#: judging a request by its ``Content-Length``.
MULTIPART_OVERHEAD_BYTES = 16 * 1024
_DOWNLOAD_CHUNK_BYTES = 64 * 1024
_MAX_FILENAME_LENGTH = 200
# "%" too: browsers percent-decode a plain ``filename=``, so "%22" would come back as a quote.
_UNSAFE_FILENAME_CHARS = re.compile(r'[\x00-\x1f\x7f"\\/;%]')
# RFC 6838 ``type/subtype`` with restricted-name characters only; no parameters.
_MIME_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
#: The scope key ``BodyLimitMiddleware`` sets, so the upload view knows it is protected.
UPLOAD_LIMIT_SCOPE_KEY = "django_pydantic_agent.upload_limit"
#: The 404 message of the attachment routes.
ATTACHMENT_NOT_FOUND = "No such attachment."


class CappedUploadHandler(FileUploadHandler):
    """Abort a multipart upload as soon as its files pass ``max_bytes`` in total.

    Install it first among ``request.upload_handlers``. It passes every chunk on to the next
    handler and produces no file itself; once the running total passes the cap (or a part
    declares a larger length) it sets ``exceeded`` and raises ``StopUpload(connection_reset=
    True)``, so Django stops reading the body instead of spooling the rest.
    """

    def __init__(self, max_bytes: int, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self.max_bytes = max_bytes
        self.received = 0
        self.exceeded = False

    def _stop(self) -> None:
        self.exceeded = True
        raise StopUpload(connection_reset=True)

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        """Refuse a part whose declared length is already over the cap."""
        super().new_file(*args, **kwargs)
        if self.content_length is not None and self.content_length > self.max_bytes:
            self._stop()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        """Count the chunk and pass it on, or stop the upload past the cap."""
        self.received += len(raw_data)
        if self.received > self.max_bytes:
            self._stop()
        return raw_data

    def file_complete(self, file_size: int) -> None:
        """Produce no file: the next handler does."""
        return None


def safe_filename(name: str) -> str:
    """A download filename safe for ``Content-Disposition``: no path, controls or quotes.

    Keeps the base name only, normalises Unicode (NFC), replaces control characters, quotes,
    backslashes, slashes, semicolons and ``%`` with ``_``, trims it to 200 characters and falls back
    to ``"attachment"``. Non-ASCII names survive as RFC 6266 ``filename*``.
    """
    base = re.split(r"[\\/]", name)[-1]
    cleaned = _UNSAFE_FILENAME_CHARS.sub("_", unicodedata.normalize("NFC", base)).strip(" .")
    return cleaned[:_MAX_FILENAME_LENGTH] or "attachment"


def _normalized_type(content_type: str | None) -> str | None:
    """The declared part type, lower-cased, or ``None`` if it is not a plain ``type/subtype``.

    A missing type is ``application/octet-stream``. Anything with control characters, NUL,
    spaces, non-ASCII or an empty half (``image/``) is refused rather than stored.
    """
    declared = (content_type or "application/octet-stream").split(";", 1)[0].strip().lower()
    return declared if _MIME_TYPE.fullmatch(declared) else None


def _type_allowed(content_type: str, allowed: Sequence[str]) -> bool:
    """Whether ``content_type`` matches the allowlist (``()`` allows all; ``image/*`` works)."""
    if not allowed:
        return True
    declared = _normalized_type(content_type)
    if declared is None:
        return False
    for pattern in allowed:
        if pattern == declared:
            return True
        if pattern.endswith("/*") and declared.startswith(pattern[:-1]):
            return True
    return False


class _FileChunks:
    """The chunks of an open file, read off the event loop; closed however the stream ends.

    An async iterator rather than an async generator: Django calls ``close()`` with the
    response, even when the client left before the first chunk was read (a generator that
    never started would never run its ``finally``).
    """

    def __init__(self, content: IO[bytes]) -> None:
        self._content = content
        self._closed = False

    def __aiter__(self) -> _FileChunks:
        return self

    async def __anext__(self) -> bytes:
        chunk = (
            b"" if self._closed else await sync_to_async(self._content.read)(_DOWNLOAD_CHUNK_BYTES)
        )
        if not chunk:
            await sync_to_async(self.close)()
            raise StopAsyncIteration
        return chunk

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._closed:
            self._closed = True
            self._content.close()


_unprotected_warned: list[bool] = []


def _warn_unprotected_once(request: HttpRequest) -> None:
    """Log once per process when uploads are served under ASGI without the size wrapper."""
    scope = getattr(request, "scope", None)
    if scope is None or scope.get(UPLOAD_LIMIT_SCOPE_KEY) or _unprotected_warned:
        return
    _unprotected_warned.append(True)
    logger.warning(
        "AG-UI uploads are served under ASGI without BodyLimitMiddleware, so Django reads "
        "and spools every upload body in full before the size cap can refuse it. Wrap the "
        "application: BodyLimitMiddleware(get_asgi_application())."
    )


class AttachmentEndpoints:
    """Handlers for ``attachments/`` and ``attachments/<id>/`` over one attachment store.

    ``access`` supplies the throttle and the CSRF check the upload runs itself (after the cap is
    installed); ``options`` the size cap and the accepted types.
    """

    def __init__(
        self, store: AttachmentStore, *, access: AccessPolicy, options: AttachmentOptions
    ) -> None:
        self._store = store
        self._access = access
        self._options = options

    def routes(self) -> list[Route]:
        """``attachments/`` (upload) and ``attachments/<attachment_id>/``, mounted when the
        store persists. The upload route runs its own CSRF check and file cap."""
        mounted = is_persistent(self._store)
        return [
            Route(
                path="attachments/",
                name="attachments",
                handlers={"POST": self.upload},
                check_csrf=False,
                capped=False,
                upload_max_bytes=self._options.max_bytes,
                mounted=mounted,
                store="attachment",
            ),
            Route(
                path="attachments/<str:attachment_id>/",
                name="attachment",
                handlers={"GET": self.download, "DELETE": self.delete},
                not_found=ATTACHMENT_NOT_FOUND,
                mounted=mounted,
                store="attachment",
            ),
        ]

    def _parse(self, request: HttpRequest) -> UploadedFile[bytes]:
        """Install the cap, run the CSRF check and parse the body (sync, in a worker thread);
        raises the ``Refusal`` refusing the upload.

        The cap must be in place before anything touches ``request.POST``, the CSRF check
        included, since that is what parses the body.
        """
        max_bytes = self._options.max_bytes
        cap = CappedUploadHandler(max_bytes, request)
        request.upload_handlers = [cap, *request.upload_handlers]
        one_file = 'Send multipart/form-data with exactly one file, in the "file" field.'
        try:
            refusal = self._access.csrf_failure(request)
            files = request.FILES
        except RequestDataTooBig:
            raise Refusal(
                413, "The form fields exceed DATA_UPLOAD_MAX_MEMORY_SIZE; send only the file."
            ) from None
        except (MultiPartParserError, TooManyFieldsSent, TooManyFilesSent):
            raise Refusal(400, one_file) from None
        if cap.exceeded:
            raise Refusal(413, f"The file exceeds the {max_bytes}-byte limit.")
        if refusal is not None:
            raise Refusal.of(refusal)
        uploads = [f for key in files for f in files.getlist(key)]
        if len(uploads) != 1 or "file" not in files:
            raise Refusal(400, one_file)
        return uploads[0]

    async def upload(self, request: HttpRequest) -> HttpResponseBase:
        """``POST attachments/``: store one file; 201 with its ref as JSON.

        Refusals: 410 (the store keeps no files), 429 (throttle), 411 (no ``Content-Length``),
        413 (over the cap, judged from ``Content-Length`` first and then while reading), 400
        (not exactly one ``file``), 415 (a part type that is not a plain ``type/subtype``, or
        not in ``AttachmentOptions.allowed_types``), 403 (anonymous callers refused).
        """
        store = self._store
        max_bytes = self._options.max_bytes
        allowed = self._options.allowed_types
        if not is_persistent(store):
            raise Refusal(410, "Uploads are turned off on this agent endpoint.")
        throttled = await self._access.check_throttle(request)
        if throttled is not None:
            return throttled
        _warn_unprotected_once(request)
        raw_length = request.META.get("CONTENT_LENGTH")
        if not raw_length:
            # Django reads no body without a length (a chunked upload would look empty).
            raise Refusal(411, "Send the upload with a Content-Length header (not chunked).")
        try:
            declared = int(raw_length)
        except ValueError:
            declared = 0
        if declared > max_bytes + MULTIPART_OVERHEAD_BYTES:
            raise Refusal(413, f"The file exceeds the {max_bytes}-byte limit.")
        upload = await sync_to_async(self._parse)(request)
        content_type = _normalized_type(upload.content_type)
        if content_type is None:
            raise Refusal(
                415,
                "The file's content type is not a valid MIME type; declare one such as "
                "'text/plain' or 'image/png'.",
            )
        if not _type_allowed(content_type, allowed):
            raise Refusal(
                415,
                f"The content type {content_type!r} is not accepted here; allowed: "
                f"{', '.join(allowed)}.",
            )
        upload.content_type = content_type
        await ensure_anonymous_session(request, store)
        ref = await store.save(upload, request=request)
        body: dict[str, Any] = {"id": ref.id, "name": ref.name, "mime": ref.mime, "size": ref.size}
        if ref.url:
            body["url"] = ref.url
        return JsonResponse(body, status=201)

    async def download(self, request: HttpRequest, attachment_id: str) -> HttpResponseBase:
        """``GET attachments/<id>/``: the file as a forced download, streamed; or 404.

        Under ASGI the body is an async iterator reading chunks in a worker thread; under
        WSGI it is a ``FileResponse``. Either way: ``Content-Disposition: attachment`` with a
        sanitised name, the stored type (or ``application/octet-stream``) and ``nosniff``.
        """
        store = self._store
        if await owns_nothing(request, store):
            raise Refusal(404, ATTACHMENT_NOT_FOUND)
        opened = await store.open(attachment_id, request=request)
        if opened is None:
            raise Refusal(404, ATTACHMENT_NOT_FOUND)
        content_type = opened.ref.mime or "application/octet-stream"
        filename = safe_filename(opened.ref.name)
        response: HttpResponseBase
        if getattr(request, "scope", None) is not None:  # ASGI: stream asynchronously
            response = StreamingHttpResponse(_FileChunks(opened.content), content_type=content_type)
            response["Content-Disposition"] = content_disposition_header(True, filename)
        else:
            response = FileResponse(
                opened.content, as_attachment=True, filename=filename, content_type=content_type
            )
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        response["Cache-Control"] = "private, no-store"
        return response

    async def delete(self, request: HttpRequest, attachment_id: str) -> HttpResponseBase:
        """``DELETE attachments/<id>/``: always 204, whether or not the file existed."""
        store = self._store
        if not await owns_nothing(request, store):
            await store.delete(attachment_id, request=request)
        return HttpResponse(status=204)
