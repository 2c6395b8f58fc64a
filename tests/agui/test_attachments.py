"""The attachment routes: upload caps, type allowlist, forced downloads, owner isolation."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.core.handlers.wsgi import WSGIRequest
from django.http import JsonResponse
from django.test import Client, RequestFactory
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from django_pydantic_agent.agui import AccessPolicy, CappedUploadHandler, safe_filename
from tests.agui.conftest import CSRF_SECRET, asgi_app, logged_in, session_cookie
from tests.agui.urls import UPLOAD_CAP

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


def as_user(user: Any) -> Any:
    async def auser() -> Any:
        return user

    return auser


def browser() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi_app()), base_url="http://testserver"
    )


async def upload(
    http: httpx.AsyncClient,
    prefix: str = "/stored/",
    *,
    name: str = "notes.txt",
    data: bytes = b"hello world",
    mime: str = "text/plain",
    field: str = "file",
    **kwargs: Any,
) -> httpx.Response:
    return await http.post(f"{prefix}attachments/", files={field: (name, data, mime)}, **kwargs)


async def test_upload_download_delete_round_trip(alice: Any) -> None:
    async with await logged_in(alice) as http:
        created = await upload(http)
        assert created.status_code == 201
        ref = created.json()
        assert ref["name"] == "notes.txt"
        assert ref["mime"] == "text/plain"
        assert ref["size"] == len(b"hello world")
        assert set(ref) == {"id", "name", "mime", "size"}
        download = await http.get(f"/stored/attachments/{ref['id']}/")
        deleted = await http.delete(f"/stored/attachments/{ref['id']}/")
        again = await http.delete(f"/stored/attachments/{ref['id']}/")
        gone = await http.get(f"/stored/attachments/{ref['id']}/")
    assert download.status_code == 200
    assert download.content == b"hello world"
    assert download.headers["content-type"] == "text/plain"
    assert download.headers["content-disposition"] == 'attachment; filename="notes.txt"'
    assert download.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in download.headers["content-security-policy"]
    assert deleted.status_code == again.status_code == 204
    assert gone.status_code == 404
    assert gone.json() == {"error": "No such attachment."}


async def test_download_filename_is_sanitised_and_rfc6266_encoded(alice: Any) -> None:
    async with await logged_in(alice) as http:
        ref = (await upload(http, name="résumé;final.txt")).json()
        download = await http.get(f"/stored/attachments/{ref['id']}/")
    disposition = download.headers["content-disposition"]
    assert disposition.startswith("attachment; filename*=utf-8''")
    assert "r%C3%A9sum%C3%A9_final.txt" in disposition


def test_safe_filename_strips_paths_controls_and_quotes() -> None:
    assert safe_filename("../../etc/passwd") == "passwd"
    assert safe_filename("C:\\Users\\me\\report.pdf") == "report.pdf"
    assert safe_filename('a"b\r\nSet-Cookie: x;.txt') == "a_b__Set-Cookie: x_.txt"
    assert safe_filename("...") == "attachment"
    assert safe_filename("") == "attachment"
    assert len(safe_filename("x" * 500)) == 200


async def test_type_allowlist_supports_wildcards_and_refuses_with_415(alice: Any) -> None:
    async with await logged_in(alice) as http:
        image = await upload(http, name="a.png", data=b"\x89PNG", mime="image/png")
        pdf = await upload(http, name="a.pdf", data=b"%PDF", mime="application/pdf")
    assert image.status_code == 201
    assert pdf.status_code == 415
    assert "'application/pdf' is not accepted" in pdf.json()["error"]
    assert "text/plain, image/*" in pdf.json()["error"]


async def test_exactly_one_file_in_the_file_field(alice: Any) -> None:
    async with await logged_in(alice) as http:
        wrong_field = await upload(http, field="upload")
        none = await http.post("/stored/attachments/", data={"file": "not a file"})
        two = await http.post(
            "/stored/attachments/",
            files=[
                ("file", ("a.txt", b"a", "text/plain")),
                ("file", ("b.txt", b"b", "text/plain")),
            ],
        )
        not_multipart = await http.post("/stored/attachments/", json={"file": "x"})
        broken = await http.post(
            "/stored/attachments/",
            content=b"--nope\r\n",
            headers={"Content-Type": "multipart/form-data"},
        )
    for response in (wrong_field, none, two, not_multipart, broken):
        assert response.status_code == 400
        assert 'exactly one file, in the "file" field' in response.json()["error"]


async def test_oversized_content_length_is_413_before_parsing(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await upload(http, data=b"x" * (UPLOAD_CAP + 64 * 1024))
    assert response.status_code == 413
    assert f"{UPLOAD_CAP}-byte limit" in response.json()["error"]


async def test_file_over_cap_is_413_from_the_upload_handler(alice: Any) -> None:
    # Small enough to pass the Content-Length pre-check, too big for the cap.
    async with await logged_in(alice) as http:
        response = await upload(http, data=b"x" * (UPLOAD_CAP + 1))
        exact = await upload(http, data=b"x" * UPLOAD_CAP)
    assert response.status_code == 413
    assert exact.status_code == 201


class CountingStream(io.BytesIO):
    """A request body that records how many bytes the parser pulled from it."""

    consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.consumed += len(chunk)
        return chunk


def test_capped_handler_stops_reading_the_body_early() -> None:
    body = encode_multipart(BOUNDARY, {"file": io.BytesIO(b"x" * (4 * 1024 * 1024))})
    stream = CountingStream(body)
    environ = RequestFactory()._base_environ(  # type: ignore[attr-defined]
        REQUEST_METHOD="POST",
        CONTENT_TYPE=MULTIPART_CONTENT,
        CONTENT_LENGTH=str(len(body)),
        **{"wsgi.input": stream},
    )
    request = WSGIRequest(environ)
    cap = CappedUploadHandler(1024, request)
    request.upload_handlers = [cap, MemoryFileUploadHandler(request)]
    files = request.FILES
    assert cap.exceeded
    assert "file" not in files
    # Django stopped reading: far less than the 4 MiB body was consumed.
    assert stream.consumed < 512 * 1024


def test_capped_handler_refuses_a_declared_oversized_part() -> None:
    cap = CappedUploadHandler(10)
    with pytest.raises(Exception, match="StopUpload"):
        cap.new_file("file", "a.txt", "text/plain", 11)
    assert cap.exceeded


async def test_null_attachment_store_answers_410(client: httpx.AsyncClient) -> None:
    response = await upload(client, "/uploads-off/".removesuffix("attachments/"))
    assert response.status_code in (404, 410)
    direct = await client.post("/uploads-off/", files={"file": ("a.txt", b"a", "text/plain")})
    assert direct.status_code == 410
    assert direct.json() == {"error": "Uploads are turned off on this agent endpoint."}


async def test_upload_throttle_is_429(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await upload(http, "/upload-throttled/")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "30"


async def test_attachment_routes_authenticate_before_method(
    client: httpx.AsyncClient, alice: Any
) -> None:
    assert (await client.get("/stored/attachments/")).status_code == 401
    assert (await upload(client)).status_code == 401
    assert (await client.get("/stored/attachments/x/")).status_code == 401
    async with await logged_in(alice) as http:
        listing = await http.get("/stored/attachments/")
        post_one = await http.post("/stored/attachments/x/")
    assert listing.status_code == 405
    assert listing.headers["allow"] == "POST"
    assert post_one.status_code == 405
    assert post_one.headers["allow"] == "DELETE, GET"


async def test_another_user_cannot_download_or_delete(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        ref = (await upload(http)).json()
    async with await logged_in(bob) as intruder:
        stolen = await intruder.get(f"/stored/attachments/{ref['id']}/")
        missing = await intruder.get("/stored/attachments/0123456789abcdef0123456789abcdef/")
        deleted = await intruder.delete(f"/stored/attachments/{ref['id']}/")
    assert (stolen.status_code, stolen.json()) == (missing.status_code, missing.json())
    assert stolen.status_code == 404
    assert deleted.status_code == 204
    async with await logged_in(alice) as http:
        still_there = await http.get(f"/stored/attachments/{ref['id']}/")
    assert still_there.content == b"hello world"


async def test_another_anonymous_browser_cannot_download_or_delete() -> None:
    async with browser() as first, browser() as second:
        created = await upload(first, "/anon/")
        ref = created.json()
        stolen = await second.get(f"/anon/attachments/{ref['id']}/")
        await second.delete(f"/anon/attachments/{ref['id']}/")
        mine = await first.get(f"/anon/attachments/{ref['id']}/")
    assert created.status_code == 201
    assert stolen.status_code == 404
    assert mine.content == b"hello world"


async def test_store_refusing_anonymous_uploads_is_403(client: httpx.AsyncClient) -> None:
    for response in (
        await upload(client, "/refusing/"),
        await client.get("/refusing/attachments/0123456789abcdef0123456789abcdef/"),
        await client.delete("/refusing/attachments/0123456789abcdef0123456789abcdef/"),
    ):
        assert response.status_code == 403
        assert "anonymous" in response.json()["error"]


async def test_upload_csrf_enforced(alice: Any) -> None:
    async with await logged_in(alice) as http:
        refused = await upload(http, "/stored-csrf/")
        http.cookies.set("csrftoken", CSRF_SECRET)
        accepted = await upload(http, "/stored-csrf/", headers={"X-CSRFToken": CSRF_SECRET})
        oversized = await upload(
            http,
            "/stored-csrf/",
            data=b"x" * (UPLOAD_CAP + 1),
            headers={"X-CSRFToken": CSRF_SECRET},
        )
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]
    assert accepted.status_code == 201
    assert oversized.status_code == 413


def test_download_under_wsgi_is_a_file_response(alice: Any) -> None:
    http = Client()
    http.force_login(alice)
    created = http.post(
        "/stored/attachments/",
        {"file": SimpleUploadedFile("w.txt", b"wsgi bytes", content_type="text/plain")},
    )
    assert created.status_code == 201
    download = http.get(f"/stored/attachments/{created.json()['id']}/")
    assert download.status_code == 200
    assert download.streaming
    assert download.getvalue() == b"wsgi bytes"
    assert download.headers["Content-Disposition"].startswith("attachment;")
    assert download.headers["X-Content-Type-Options"] == "nosniff"


def test_type_allowlist_rules() -> None:
    from django_pydantic_agent.agui.attachments import _type_allowed

    assert _type_allowed("application/x-anything", ())
    assert _type_allowed("Text/Plain; charset=utf-8", ("text/plain",))
    assert _type_allowed("image/webp", ("image/*",))
    assert not _type_allowed("imagex/webp", ("image/*",))
    assert not _type_allowed("text/html", ("text/plain", "image/*"))


async def test_too_many_files_is_400_not_413(alice: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 1
    async with await logged_in(alice) as http:
        response = await http.post(
            "/stored/attachments/",
            files=[("file", ("a.txt", b"a", "text/plain")), ("x", ("b.txt", b"b", "text/plain"))],
        )
    assert response.status_code == 400


async def test_oversized_form_fields_are_413(alice: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    async with await logged_in(alice) as http:
        response = await http.post(
            "/stored/attachments/",
            data={"note": "x" * 100},
            files={"file": ("a.txt", b"a", "text/plain")},
        )
    assert response.status_code == 413
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["error"]


async def test_malformed_content_length_is_400(alice: Any) -> None:
    from tests.agui.urls import persisting

    request = RequestFactory().post(
        "/stored/attachments/",
        {"file": SimpleUploadedFile("a.txt", b"abc", content_type="text/plain")},
    )
    request.META["CONTENT_LENGTH"] = "lots"
    request.auser = as_user(alice)  # what AuthenticationMiddleware would attach
    response = await persisting.attachments_view(request)
    assert response.status_code == 400


async def test_a_store_url_is_returned(alice: Any) -> None:
    import dataclasses

    from django_pydantic_agent.agui import AGUIServer
    from django_pydantic_agent.contrib.store.stores import DefaultAttachmentStore
    from tests.agui.agents import text_agent

    class LinkingStore(DefaultAttachmentStore):
        async def save(self, upload: Any, *, request: Any) -> Any:
            ref = await super().save(upload, request=request)
            return dataclasses.replace(ref, url=f"/files/{ref.id}/")

    server = AGUIServer(
        text_agent(), attachment_store=LinkingStore(), access=AccessPolicy(csrf_exempt=True)
    )
    request = RequestFactory().post(
        "/", {"file": SimpleUploadedFile("a.txt", b"abc", content_type="text/plain")}
    )
    request.auser = as_user(alice)  # what AuthenticationMiddleware would attach
    response = await server.attachments_view(request)
    assert isinstance(response, JsonResponse)
    assert response.status_code == 201
    body = json.loads(response.content)
    assert body["url"] == f"/files/{body['id']}/"


# Hardening of the upload and download routes.


def multipart(part_type: bytes, *, name: bytes = b"a.txt") -> bytes:
    return (
        b'--Z\r\nContent-Disposition: form-data; name="file"; filename="'
        + name
        + b'"\r\nContent-Type: '
        + part_type
        + b"\r\n\r\nhello\r\n--Z--\r\n"
    )


@pytest.mark.parametrize(
    "part_type",
    [b"text/pl\x00ain", b"text/plain\x07", b"image/", b"text", b"a" * 300 + b"/b", b"t\xc3\xbf/x"],
)
async def test_an_unusable_part_content_type_is_415(part_type: bytes, alice: Any) -> None:
    # Refused even with no allowlist: a NUL in the stored type is a 500 on PostgreSQL.
    async with await logged_in(alice) as http:
        response = await http.post(
            "/any-type/attachments/",
            content=multipart(part_type),
            headers={"Content-Type": "multipart/form-data; boundary=Z"},
        )
    assert response.status_code == 415
    assert "content type" in response.json()["error"]


async def test_a_part_content_type_is_stored_normalised(alice: Any) -> None:
    async with await logged_in(alice) as http:
        created = await http.post(
            "/stored/attachments/",
            content=multipart(b"TEXT/Plain; charset=utf-8"),
            headers={"Content-Type": "multipart/form-data; boundary=Z"},
        )
        download = await http.get(f"/stored/attachments/{created.json()['id']}/")
    assert created.status_code == 201
    assert created.json()["mime"] == "text/plain"
    assert download.headers["content-type"] == "text/plain"


def test_the_wildcard_needs_a_subtype() -> None:
    from django_pydantic_agent.agui.attachments import _type_allowed

    assert not _type_allowed("image/", ("image/*",))
    assert not _type_allowed("image", ("image/*",))
    assert _type_allowed("image/png", ("image/*",))


async def test_an_upload_without_content_length_is_411(alice: Any) -> None:
    from tests.agui.urls import persisting

    request = RequestFactory().post(
        "/stored/attachments/",
        {"file": SimpleUploadedFile("a.txt", b"abc", content_type="text/plain")},
    )
    del request.META["CONTENT_LENGTH"]
    request.auser = as_user(alice)
    response = await persisting.attachments_view(request)
    assert response.status_code == 411
    assert "Content-Length" in json.loads(response.content)["error"]


async def test_a_chunked_upload_is_411_not_a_misleading_400(alice: Any) -> None:
    async def body() -> Any:
        yield multipart(b"text/plain")

    async with await logged_in(alice) as http:
        response = await http.post(
            "/stored/attachments/",
            content=body(),
            headers={"Content-Type": "multipart/form-data; boundary=Z"},
        )
    assert response.status_code == 411


async def test_asgi_uploads_without_the_wrapper_log_a_warning_once(alice: Any, caplog: Any) -> None:
    from django_pydantic_agent.agui import attachments

    attachments._unprotected_warned.clear()
    caplog.set_level(logging.WARNING, logger="django_pydantic_agent.agui")
    async with await logged_in(alice) as http:
        first = await upload(http)
        second = await upload(http)
    assert first.status_code == second.status_code == 201
    warned = [r for r in caplog.records if "without BodyLimitMiddleware" in r.getMessage()]
    assert len(warned) == 1


async def test_asgi_uploads_behind_the_wrapper_do_not_warn(alice: Any, caplog: Any) -> None:
    from django_pydantic_agent.agui import UploadLimitMiddleware, attachments

    attachments._unprotected_warned.clear()
    caplog.set_level(logging.WARNING, logger="django_pydantic_agent.agui")
    transport = httpx.ASGITransport(app=UploadLimitMiddleware(asgi_app()))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        http.cookies.set("sessionid", await session_cookie(alice))
        created = await upload(http)
    assert created.status_code == 201
    assert not [r for r in caplog.records if "BodyLimitMiddleware" in r.getMessage()]
    attachments._unprotected_warned.clear()


async def test_a_download_abandoned_before_the_first_chunk_closes_the_file(alice: Any) -> None:
    from django.http import StreamingHttpResponse

    from tests.agui.urls import persisting

    async with await logged_in(alice) as http:
        ref = (await upload(http)).json()
    closed: list[bool] = []
    store = persisting.attachment_store
    original_open = store.open

    async def tracking_open(attachment_id: str, *, request: Any) -> Any:
        opened = await original_open(attachment_id, request=request)
        real_close = opened.content.close

        def close() -> None:
            closed.append(True)
            real_close()

        opened.content.close = close
        return opened

    request = RequestFactory().get(f"/stored/attachments/{ref['id']}/")
    request.scope = {"type": "http"}  # served under ASGI: the async download path
    request.auser = as_user(alice)
    store.open = tracking_open  # type: ignore[method-assign]
    try:
        response = await persisting.attachment_view(request, attachment_id=ref["id"])
    finally:
        del store.open
    assert isinstance(response, StreamingHttpResponse)
    # The client left: Django closes the response without reading a chunk.
    response.close()
    assert closed == [True]


def test_a_percent_sign_never_reaches_the_download_filename() -> None:
    from django.utils.http import content_disposition_header

    assert safe_filename("name%22.txt") == "name_22.txt"
    header = content_disposition_header(True, safe_filename("é%22.txt"))
    assert "%25" not in header


async def test_cookieless_attachment_reads_create_no_session(client: httpx.AsyncClient) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.sessions.models import Session

    before = await sync_to_async(Session.objects.count)()
    download = await client.get("/anon/attachments/0123456789abcdef0123456789abcdef/")
    deleted = await client.delete("/anon/attachments/0123456789abcdef0123456789abcdef/")
    nul = await client.get("/anon/attachments/%00x/")
    assert download.status_code == nul.status_code == 404
    assert nul.json() == {"error": "No such attachment."}
    assert deleted.status_code == 204
    assert await sync_to_async(Session.objects.count)() == before


async def test_attachment_delete_csrf_enforced(alice: Any) -> None:
    async with await logged_in(alice) as http:
        http.cookies.set("csrftoken", CSRF_SECRET)
        token = {"X-CSRFToken": CSRF_SECRET}
        created = await upload(http, "/stored-csrf/", headers=token)
        attachment_id = created.json()["id"]
        http.cookies.delete("csrftoken")
        refused = await http.delete(f"/stored-csrf/attachments/{attachment_id}/")
        kept = await http.get(f"/stored-csrf/attachments/{attachment_id}/")
        http.cookies.set("csrftoken", CSRF_SECRET)
        deleted = await http.delete(f"/stored-csrf/attachments/{attachment_id}/", headers=token)
        gone = await http.get(f"/stored-csrf/attachments/{attachment_id}/")
    assert created.status_code == 201
    assert refused.status_code == 403
    assert refused.json()["error"].startswith("CSRF verification failed")
    assert kept.status_code == 200
    assert kept.content == b"hello world"
    assert deleted.status_code == 204
    assert gone.status_code == 404
