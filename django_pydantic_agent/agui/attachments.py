"""The attachment routes: upload one file, download it, delete it.

Mounted only when the server's attachment store persists. The byte cap is enforced while the
body is read, never after: a ``Content-Length`` over the cap is refused before any parsing, and
``CappedUploadHandler`` stops the multipart parser the moment the file passes the cap, so the
rest is never spooled to a temporary file. Under ASGI, Django reads the whole request body
before any view runs; ``UploadLimitMiddleware`` (see ``django_pydantic_agent.agui.asgi``) closes
that gap. Downloads are forced (``Content-Disposition: attachment``) and never sniffed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import AsyncIterator
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

from django_pydantic_agent.agui.access import error_response, store_refusal
from django_pydantic_agent.persistence import StoreError, is_persistent

if TYPE_CHECKING:
    from django.core.files.uploadedfile import UploadedFile

    from django_pydantic_agent.agui.server import AGUIServer

__all__ = [
    "MULTIPART_OVERHEAD_BYTES",
    "AttachmentEndpoints",
    "CappedUploadHandler",
    "safe_filename",
]

#: Allowance for the multipart envelope (boundaries, part headers) on top of the file cap when
#: judging a request by its ``Content-Length``.
MULTIPART_OVERHEAD_BYTES = 16 * 1024
_DOWNLOAD_CHUNK_BYTES = 64 * 1024
_MAX_FILENAME_LENGTH = 200
_UNSAFE_FILENAME_CHARS = re.compile(r'[\x00-\x1f\x7f"\\/;]')


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
    backslashes, slashes and semicolons with ``_``, trims it to 200 characters and falls back
    to ``"attachment"``. Non-ASCII names survive as RFC 6266 ``filename*``.
    """
    base = re.split(r"[\\/]", name)[-1]
    cleaned = _UNSAFE_FILENAME_CHARS.sub("_", unicodedata.normalize("NFC", base)).strip(" .")
    return cleaned[:_MAX_FILENAME_LENGTH] or "attachment"


def _type_allowed(content_type: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``content_type`` matches the allowlist (``()`` allows all; ``image/*`` works)."""
    if not allowed:
        return True
    declared = content_type.split(";", 1)[0].strip().lower()
    for pattern in allowed:
        if pattern == declared:
            return True
        if pattern.endswith("/*") and declared.startswith(pattern[:-1]):
            return True
    return False


async def _chunks(content: IO[bytes]) -> AsyncIterator[bytes]:
    """Read ``content`` in chunks off the event loop, closing it however the stream ends."""
    try:
        while chunk := await sync_to_async(content.read)(_DOWNLOAD_CHUNK_BYTES):
            yield chunk
    finally:
        await sync_to_async(content.close)()


class AttachmentEndpoints:
    """Handlers for ``attachments/`` and ``attachments/<id>/`` of one ``AGUIServer``."""

    def __init__(self, server: AGUIServer) -> None:
        self._server = server

    def _parse(
        self, request: HttpRequest
    ) -> tuple[UploadedFile[bytes] | None, HttpResponseBase | None]:
        """Install the cap, run the CSRF check and parse the body (sync, in a worker thread).

        The cap must be in place before anything touches ``request.POST``, the CSRF check
        included, since that is what parses the body.
        """
        server = self._server
        cap = CappedUploadHandler(server.attachment_max_bytes, request)
        request.upload_handlers = [cap, *request.upload_handlers]
        one_file = error_response(
            400, 'Send multipart/form-data with exactly one file, in the "file" field.'
        )
        try:
            refusal = server.access.csrf_failure(request)
            files = request.FILES
        except RequestDataTooBig:
            return None, error_response(
                413, "The form fields exceed DATA_UPLOAD_MAX_MEMORY_SIZE; send only the file."
            )
        except (MultiPartParserError, TooManyFieldsSent, TooManyFilesSent):
            return None, one_file
        if cap.exceeded:
            return None, error_response(
                413, f"The file exceeds the {server.attachment_max_bytes}-byte limit."
            )
        if refusal is not None:
            return None, refusal
        uploads = [f for key in files for f in files.getlist(key)]
        if len(uploads) != 1 or "file" not in files:
            return None, one_file
        return uploads[0], None

    async def upload(self, request: HttpRequest) -> HttpResponseBase:
        """``POST attachments/``: store one file; 201 with its ref as JSON.

        Refusals: 410 (the store keeps no files), 429 (throttle), 413 (over the cap, judged
        from ``Content-Length`` first and then while reading), 400 (not exactly one ``file``),
        415 (type not in ``attachment_allowed_types``), 403 (anonymous callers refused).
        """
        server = self._server
        if not is_persistent(server.attachment_store):
            return error_response(410, "Uploads are turned off on this agent endpoint.")
        throttled = await server.access.check_throttle(request)
        if throttled is not None:
            return throttled
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > server.attachment_max_bytes + MULTIPART_OVERHEAD_BYTES:
            return error_response(
                413, f"The file exceeds the {server.attachment_max_bytes}-byte limit."
            )
        upload, refusal = await sync_to_async(self._parse)(request)
        if refusal is not None:
            return refusal
        assert upload is not None
        content_type = upload.content_type or "application/octet-stream"
        if not _type_allowed(content_type, server.attachment_allowed_types):
            return error_response(
                415,
                f"The content type {content_type!r} is not accepted here; allowed: "
                f"{', '.join(server.attachment_allowed_types)}.",
            )
        await server.ensure_anonymous_session(request)
        try:
            ref = await server.attachment_store.save(upload, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="attachment")
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
        await self._server.ensure_anonymous_session(request)
        try:
            opened = await self._server.attachment_store.open(attachment_id, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="attachment")
        if opened is None:
            return error_response(404, "No such attachment.")
        content_type = opened.ref.mime or "application/octet-stream"
        filename = safe_filename(opened.ref.name)
        response: HttpResponseBase
        if getattr(request, "scope", None) is not None:  # ASGI: stream asynchronously
            response = StreamingHttpResponse(_chunks(opened.content), content_type=content_type)
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
        await self._server.ensure_anonymous_session(request)
        try:
            await self._server.attachment_store.delete(attachment_id, request=request)
        except StoreError as exc:
            return store_refusal(exc, store="attachment")
        return HttpResponse(status=204)
