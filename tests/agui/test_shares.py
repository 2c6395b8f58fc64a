"""Share links: ``threads/<id>/share/`` makes, shows and revokes one; ``shared/<token>/`` opens
a read-only snapshot without login. Hostile: a link reads only its thread as it was shared,
writes nothing, serves no file the owner did not include; revoked and expired links are 404;
another owner can neither share nor revoke; the owner's routes need the CSRF token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.shares import LINK_GONE, PUBLIC_HEADERS
from django_pydantic_agent.contrib.store.models import StoredShare
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.sharing import share_digest
from tests.agui.conftest import CSRF_SECRET, asgi_app, logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


def stranger() -> httpx.AsyncClient:
    """A client with no session: anyone the link was sent to."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi_app()), base_url="http://testserver"
    )


async def turn(
    http: httpx.AsyncClient,
    text: str,
    *,
    thread: str = "thread-1",
    run: str = "run-1",
    prefix: str = "/stored/",
    extra: dict[str, Any] | None = None,
) -> None:
    payload = run_body(thread_id=thread, run_id=run, text=text)
    payload["messages"] = [{"id": f"u-{run}", "role": "user", "content": text, **(extra or {})}]
    response = await http.post(prefix, json=payload)
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED", response.text
    await RunCoordinator.wait_for_all_runs()


def link_path(url: str) -> str:
    return httpx.URL(url).path


async def test_a_link_opens_the_snapshot_as_it_was_shared_without_login(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Plan a trip to Lisbon")
        await turn(http, "Secret other thread", thread="thread-2", run="run-9")
        made = await http.post("/stored/threads/thread-1/share/", json={"expiresIn": 3600})
        await turn(http, "Added after sharing", run="run-2")
        listed = (await http.get("/stored/shares/")).json()
        current = (await http.get("/stored/threads/thread-1/share/")).json()
    assert made.status_code == 201, made.text
    body = made.json()
    assert set(body) >= {"url", "expiresAt"}
    async with stranger() as anyone:
        opened = await anyone.get(link_path(body["url"]))
    assert opened.status_code == 200, opened.text
    for name, value in PUBLIC_HEADERS.items():
        assert opened.headers[name] == value
    shown = opened.json()
    texts = [m["content"] for m in shown["messages"] if m["role"] == "user"]
    assert texts == ["Plan a trip to Lisbon"]  # the snapshot, not what came after
    assert "Secret other thread" not in opened.text
    assert "Added after sharing" not in opened.text
    assert shown["attachmentsUrl"] is None
    assert [link["threadId"] for link in listed["shares"]] == ["thread-1"]
    assert "url" not in current
    assert current["expiresAt"] == body["expiresAt"]
    # The store keeps the digest only, never the token.
    token = link_path(body["url"]).rstrip("/").rsplit("/", 1)[-1]
    assert len(token) >= 22  # >= 128 bits of base64url
    assert await StoredShare.objects.filter(token_digest=token).aexists() is False
    assert await StoredShare.objects.filter(token_digest=share_digest(token)).aexists()


async def test_a_link_writes_nothing_and_reaches_no_other_route(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Plan a trip")
        url = link_path((await http.post("/stored/threads/thread-1/share/")).json()["url"])
        before = (await http.get("/stored/threads/thread-1/")).json()
    async with stranger() as anyone:
        writes = [
            await anyone.post(url, json={"messages": []}),
            await anyone.put(url, json={}),
            await anyone.delete(url),
            await anyone.patch(url, json={"title": "pwned"}),
        ]
        other = await anyone.get("/stored/threads/thread-1/")
        listing = await anyone.get("/stored/threads/")
        run = await anyone.post("/stored/", json=run_body(thread_id="thread-1", run_id="r-x"))
    async with await logged_in(alice) as http:
        after = (await http.get("/stored/threads/thread-1/")).json()
        still = await http.get(url)
    assert [w.status_code for w in writes] == [405, 405, 405, 405]
    assert other.status_code in (401, 403)
    assert listing.status_code in (401, 403)
    assert run.status_code in (401, 403)
    assert after == before
    assert still.status_code == 200


async def test_revoked_expired_and_made_up_links_are_404(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Plan a trip")
        first = link_path((await http.post("/stored/threads/thread-1/share/")).json()["url"])
        second = link_path((await http.post("/stored/threads/thread-1/share/")).json()["url"])
        revoked = await http.delete("/stored/threads/thread-1/share/")
        gone = await http.get("/stored/threads/thread-1/share/")
        third = link_path((await http.post("/stored/threads/thread-1/share/")).json()["url"])
    await StoredShare.objects.filter(revoked_at__isnull=True).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    async with stranger() as anyone:
        answers = [await anyone.get(url) for url in (first, second, third)]
        made_up = await anyone.get(second[:-5] + "AAAA/")
    assert revoked.status_code == 204
    assert gone.status_code == 404
    for answer in [*answers, made_up]:
        assert answer.status_code == 404
        assert answer.json() == {"error": LINK_GONE}
        assert answer.headers["X-Robots-Tag"] == "noindex, nofollow"
    # A revoked link keeps its row for the admin, not its snapshot.
    assert [row.snapshot async for row in StoredShare.objects.exclude(revoked_at=None)] == [[], []]


async def test_another_owner_can_neither_share_nor_revoke_nor_list(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Alice's plans")
        url = link_path((await http.post("/stored/threads/thread-1/share/")).json()["url"])
    async with await logged_in(bob) as http:
        shared = await http.post("/stored/threads/thread-1/share/")
        revoked = await http.delete("/stored/threads/thread-1/share/")
        shown = await http.get("/stored/threads/thread-1/share/")
        listed = (await http.get("/stored/shares/")).json()
        # Bob's own thread of the same id: revoking his link leaves Alice's alone.
        await turn(http, "Bob's plans")
        own = await http.delete("/stored/threads/thread-1/share/")
        opened = await http.get(url)  # the link itself opens for anyone holding it
    assert shared.status_code == 404
    assert revoked.status_code == 404
    assert shown.status_code == 404
    assert listed == {"shares": []}
    assert own.status_code == 204
    assert opened.status_code == 200
    assert "Alice's plans" in opened.text
    assert "Bob's plans" not in opened.text
    assert await StoredShare.objects.acount() == 1


async def test_sharing_needs_the_csrf_token(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Plan a trip")
        forged = await http.post("/stored-csrf/threads/thread-1/share/")
        forged_revoke = await http.delete("/stored-csrf/threads/thread-1/share/")
        http.cookies.set("csrftoken", CSRF_SECRET)
        allowed = await http.post(
            "/stored-csrf/threads/thread-1/share/", headers={"X-CSRFToken": CSRF_SECRET}
        )
    assert forged.status_code == 403
    assert forged_revoke.status_code == 403
    assert allowed.status_code == 201


async def test_a_link_serves_only_the_files_the_owner_included(alice: Any) -> None:
    async with await logged_in(alice) as http:
        files = http.post
        quoted = (
            await files("/stored/attachments/", files={"file": ("a.txt", b"quoted", "text/plain")})
        ).json()
        other = (
            await files("/stored/attachments/", files={"file": ("b.txt", b"private", "text/plain")})
        ).json()
        await turn(http, "Read it", extra={"attachments": [quoted]})
        plain = (await http.post("/stored/threads/thread-1/share/")).json()
        async with stranger() as anyone:
            plain_body = await anyone.get(link_path(plain["url"]))
            plain_file = await anyone.get(f"{link_path(plain['url'])}attachments/{quoted['id']}/")
        with_files = (
            await http.post("/stored/threads/thread-1/share/", json={"includeAttachments": True})
        ).json()
    base = link_path(with_files["url"])
    async with stranger() as anyone:
        body = (await anyone.get(base)).json()
        served = await anyone.get(f"{base}attachments/{quoted['id']}/")
        refused = await anyone.get(f"{base}attachments/{other['id']}/")
    assert "a.txt" not in plain_body.text  # not even the names without the owner's choice
    assert plain_file.status_code == 404
    assert body["attachmentsUrl"] == f"{base}attachments/"
    assert served.status_code == 200
    assert served.content == b"quoted"
    assert served.headers["Content-Disposition"].startswith("attachment")
    assert refused.status_code == 404
    assert b"private" not in refused.content


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"expiresIn": 1}, '"expiresIn" must be'),
        ({"expiresIn": 10**9}, '"expiresIn" must be'),
        ({"includeAttachments": "yes"}, '"includeAttachments" must be'),
        (["x"], "Send a JSON object"),
        ({"expiresIn": 3600, "public": True}, 'Unknown field "public"'),
    ],
)
async def test_a_bad_share_body_is_a_400_naming_it(alice: Any, body: Any, named: str) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Plan a trip")
        refused = await http.post("/stored/threads/thread-1/share/", json=body)
    assert refused.status_code == 400
    assert named in refused.json()["error"]
    assert await StoredShare.objects.acount() == 0


@pytest.mark.parametrize("prefix", ["/session/"])
async def test_a_store_that_cannot_share_declares_it_and_mounts_no_route(
    alice: Any, prefix: str
) -> None:
    from tests.agui.urls import in_session

    async with await logged_in(alice) as http:
        answer = await http.post(f"{prefix}threads/thread-1/share/")
    assert store_features(in_session.conversation_store).share is False
    assert answer.status_code == 404


async def test_a_scoped_store_shares_within_its_scope(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "scoped words", prefix="/history-scoped/")
        await turn(http, "plain words", run="run-2", prefix="/history/")
        scoped = (await http.post("/history-scoped/threads/thread-1/share/")).json()
        plain = (await http.post("/history/threads/thread-1/share/")).json()
        listed = (await http.get("/history-scoped/shares/")).json()
    token = link_path(plain["url"]).rstrip("/").rsplit("/", 1)[-1]
    async with stranger() as anyone:
        opened = await anyone.get(link_path(scoped["url"]))
        crossed = await anyone.get(f"/history-scoped/shared/{token}/")
    assert scoped["threadId"] == "thread-1"
    assert "scoped words" in opened.text
    assert "plain words" not in opened.text
    assert [link["threadId"] for link in listed["shares"]] == ["thread-1"]
    assert crossed.status_code == 404  # another scope's link is as unknown as a missing one


async def test_the_link_routes_are_throttled_per_client(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "Plan a trip", prefix="/share-throttled/")
        url = link_path((await http.post("/share-throttled/threads/thread-1/share/")).json()["url"])
    async with stranger() as anyone:
        answers = [await anyone.get(url) for _ in range(3)]
        guessed = await anyone.get(url[:-5] + "AAAA/")
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert int(answers[-1].headers["Retry-After"]) >= 1
    assert guessed.status_code == 429  # guessing tokens counts against the same budget
