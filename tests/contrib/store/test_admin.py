"""Admin pages for stored conversations and attachments, through the admin client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.test import Client

from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    StoredMessage,
)
from tests.contrib.store.admin_threads import Turn, write_thread

pytestmark = pytest.mark.django_db
OnCommit = Callable[..., Any]
PREFIX = "/admin/django_pydantic_agent_store"


@pytest.fixture
def conv() -> StoredConversation:
    """A thread of owner 42 with one user message, written as a run writes it."""
    return write_thread(
        [Turn(role="user", content="<b>hi</b>", agui_id="m0")],
        owner_id="42",
        thread_id="thread-1",
        title="Paris trip",
    )


def test_conversation_changelist_searches_title_and_owner(
    admin_client: Client, conv: StoredConversation
) -> None:
    StoredConversation.objects.create(owner_id="7", thread_id="other", title="Berlin")

    by_title = admin_client.get(f"{PREFIX}/storedconversation/", {"q": "paris"}).content.decode()
    by_owner = admin_client.get(f"{PREFIX}/storedconversation/", {"q": "7"}).content.decode()

    assert "Paris trip" in by_title
    assert "Berlin" not in by_title
    assert "Berlin" in by_owner
    assert "Paris trip" not in by_owner


def test_conversation_page_shows_messages_read_only(
    admin_client: Client, conv: StoredConversation
) -> None:
    page = admin_client.get(f"{PREFIX}/storedconversation/{conv.pk}/change/").content.decode()

    assert "&lt;b&gt;hi&lt;/b&gt;" in page  # the escaped text
    assert 'name="message_rows-0-role"' not in page  # no editable inline fields
    assert "message_rows-TOTAL_FORMS" in page
    assert admin_client.get(f"{PREFIX}/storedconversation/add/").status_code == 403


def test_title_is_editable_from_the_admin(admin_client: Client, conv: StoredConversation) -> None:
    response = admin_client.post(
        f"{PREFIX}/storedconversation/{conv.pk}/change/",
        {
            "title": "Renamed",
            "message_rows-TOTAL_FORMS": "1",
            "message_rows-INITIAL_FORMS": "1",
            "attachment_links-TOTAL_FORMS": "0",
            "attachment_links-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    conv.refresh_from_db()
    assert conv.title == "Renamed"
    assert StoredMessage.objects.filter(conversation=conv).count() == 1


def test_admin_delete_of_a_conversation_cleans_up_its_attachments(
    admin_client: Client, conv: StoredConversation, on_commit: OnCommit
) -> None:
    default_storage.save("b/admin", ContentFile(b"abc"))
    att = StoredAttachment.objects.create(owner_id="42", file="b/admin", size=3)
    conv.attachments.add(att)

    with on_commit(execute=True):
        response = admin_client.post(
            f"{PREFIX}/storedconversation/{conv.pk}/delete/", {"post": "yes"}
        )

    assert response.status_code == 302
    assert not StoredConversation.objects.exists()
    assert not StoredAttachment.objects.exists()
    assert not default_storage.exists("b/admin")


def test_bulk_delete_action_on_conversations(
    admin_client: Client, conv: StoredConversation
) -> None:
    response = admin_client.post(
        f"{PREFIX}/storedconversation/",
        {"action": "delete_selected", "_selected_action": [conv.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not StoredConversation.objects.exists()


def test_attachment_page_shows_metadata_quotes_and_dedup_siblings(
    admin_client: Client, conv: StoredConversation
) -> None:
    sha = "a" * 64
    att = StoredAttachment.objects.create(owner_id="42", name="report.pdf", sha256=sha, size=9)
    sibling = StoredAttachment.objects.create(owner_id="42", name="copy.pdf", sha256=sha)
    StoredAttachment.objects.create(owner_id="99", name="foreign.pdf", sha256=sha)
    conv.attachments.add(att)

    page = admin_client.get(f"{PREFIX}/storedattachment/{att.pk}/change/").content.decode()

    assert "report.pdf" in page
    assert "copy.pdf" in page
    assert f"/storedattachment/{sibling.pk}/change/" in page
    assert "foreign.pdf" not in page  # siblings never cross owners
    assert "Paris trip" in page
    listing = admin_client.get(f"{PREFIX}/storedattachment/").content.decode()
    assert "aaaaaaaaaaaa" in listing
    assert admin_client.get(f"{PREFIX}/storedattachment/add/").status_code == 403


def test_attachment_page_for_unhashed_orphan(admin_client: Client) -> None:
    att = StoredAttachment.objects.create(owner_id="1", name="old.bin")
    page = admin_client.get(f"{PREFIX}/storedattachment/{att.pk}/change/").content.decode()
    assert "not hashed yet" in page
    assert "an orphan" in page


def test_attachment_siblings_none(admin_client: Client) -> None:
    att = StoredAttachment.objects.create(owner_id="1", name="solo", sha256="b" * 64)
    page = admin_client.get(f"{PREFIX}/storedattachment/{att.pk}/change/").content.decode()
    assert '<div class="readonly">none</div>' in page


def test_admin_deletes_of_attachments_keep_shared_blobs(
    admin_client: Client, on_commit: OnCommit
) -> None:
    default_storage.save("b/pair", ContentFile(b"xy"))
    first = StoredAttachment.objects.create(owner_id="1", file="b/pair", size=2)
    second = StoredAttachment.objects.create(owner_id="1", file="b/pair", size=2)

    with on_commit(execute=True):
        admin_client.post(f"{PREFIX}/storedattachment/{first.pk}/delete/", {"post": "yes"})
    assert default_storage.exists("b/pair")

    with on_commit(execute=True):
        admin_client.post(
            f"{PREFIX}/storedattachment/",
            {"action": "delete_selected", "_selected_action": [second.pk], "post": "yes"},
        )
    assert not StoredAttachment.objects.exists()
    assert not default_storage.exists("b/pair")


def test_non_staff_cannot_reach_the_pages(client: Client, django_user_model: type[User]) -> None:
    user = django_user_model.objects.create_user("plain", password="pw")
    client.force_login(user)
    response = client.get(f"{PREFIX}/storedconversation/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_huge_messages_are_cut_on_the_admin_page(admin_client: Client) -> None:
    conv = write_thread([Turn(role="user", content="x" * 100_000)], title="Long")
    page = admin_client.get(f"{PREFIX}/storedconversation/{conv.pk}/change/").content.decode()
    assert "x" * 100_000 not in page
    assert "characters in all)" in page


# --- owners -------------------------------------------------------------------------------

ANON = "anon:k3ysecretsessionvalue0123456789"


def test_owner_column_names_users_anonymous_sessions_and_raw_ids(
    admin_client: Client, alice: User
) -> None:
    StoredConversation.objects.create(owner_id=str(alice.pk), thread_id="t1", title="By alice")
    StoredConversation.objects.create(owner_id=ANON, thread_id="t2", title="By a visitor")
    StoredConversation.objects.create(owner_id="service-7", thread_id="t3", title="By a job")
    StoredConversation.objects.create(owner_id="987654", thread_id="t4", title="Gone user")
    StoredConversation.objects.create(owner_id="", thread_id="t5", title="Nobody")
    StoredConversation.objects.create(owner_id=f"0{alice.pk}", thread_id="t6", title="Not her")

    page = admin_client.get(f"{PREFIX}/storedconversation/").content.decode()

    assert f'<a href="/admin/auth/user/{alice.pk}/change/">alice</a>' in page
    assert "anonymous session " in page
    assert "k3ysecret" not in page  # never the session key
    assert '<td class="field-owner">service-7</td>' in page
    assert '<td class="field-owner">987654</td>' in page  # no such user: the raw id
    assert '<td class="field-owner">no owner</td>' in page
    assert f'<td class="field-owner">0{alice.pk}</td>' in page  # not alice's canonical id
    assert ">Owner</a>" in page  # a sortable column header
    assert "Owner id" not in page


def test_owner_users_are_loaded_once_per_changelist_page(
    admin_client: Client, django_user_model: type[User]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(f"{PREFIX}/storedconversation/").status_code == 200
        return len(captured)

    first = django_user_model.objects.create_user("u0")
    StoredConversation.objects.create(owner_id=str(first.pk), thread_id="t0")
    one_owner = queries()
    for n in range(1, 6):
        user = django_user_model.objects.create_user(f"u{n}")
        StoredConversation.objects.create(owner_id=str(user.pk), thread_id=f"t{n}")
    StoredConversation.objects.create(owner_id=ANON, thread_id="anon")

    assert queries() == one_owner


def test_search_by_owner_id_stays_exact(admin_client: Client, alice: User) -> None:
    StoredConversation.objects.create(owner_id=str(alice.pk), thread_id="t1", title="Mine")
    StoredConversation.objects.create(owner_id=f"{alice.pk}0", thread_id="t2", title="Other")

    page = admin_client.get(f"{PREFIX}/storedconversation/", {"q": str(alice.pk)}).content.decode()

    assert "Mine" in page
    assert "Other" not in page


def test_change_pages_and_other_lists_show_the_owner(
    admin_client: Client, alice: User, conv: StoredConversation
) -> None:
    att = StoredAttachment.objects.create(owner_id=str(alice.pk), name="a.txt")
    StoredAttachment.objects.create(owner_id=ANON, name="b.txt")
    conv.owner_id = str(alice.pk)
    conv.save()

    change = admin_client.get(f"{PREFIX}/storedconversation/{conv.pk}/change/").content.decode()
    detail = admin_client.get(f"{PREFIX}/storedattachment/{att.pk}/change/").content.decode()
    listing = admin_client.get(f"{PREFIX}/storedattachment/").content.decode()

    link = f'<a href="/admin/auth/user/{alice.pk}/change/">alice</a>'
    assert link in change
    assert link in detail
    assert link in listing
    assert "anonymous session " in listing
    assert "k3ysecret" not in listing
    assert f'<div class="readonly">{alice.pk}</div>' in detail  # the raw id too


def test_change_pages_never_show_an_anonymous_owners_session_key(admin_client: Client) -> None:
    conv = StoredConversation.objects.create(owner_id=ANON, thread_id="t", title="Visitor")
    att = StoredAttachment.objects.create(owner_id=ANON, name="v.txt")

    for url in (
        f"{PREFIX}/storedconversation/{conv.pk}/change/",
        f"{PREFIX}/storedattachment/{att.pk}/change/",
    ):
        page = admin_client.get(url).content.decode()
        assert "anonymous session " in page
        assert "anon:\u2026 (a session key, not shown)" in page
        assert "k3ysecret" not in page


def test_owner_label_without_a_user_admin_is_the_plain_username(alice: User) -> None:
    from django.contrib.admin import AdminSite

    from django_pydantic_agent.contrib.store.admin import owner_label

    assert owner_label(AdminSite(name="bare"), str(alice.pk), alice) == "alice"


# --- the attachment's stored file ---------------------------------------------------------


def test_attachment_page_shows_the_stored_file_as_text_not_a_link(admin_client: Client) -> None:
    name = "django_pydantic_agent/attachments/234964d2493849a29feb5439136bee5f"
    att = StoredAttachment.objects.create(owner_id="1", name="notes.txt", file=name, size=28)
    blobless = StoredAttachment.objects.create(owner_id="1", name="gone.txt")

    page = admin_client.get(f"{PREFIX}/storedattachment/{att.pk}/change/").content.decode()
    empty = admin_client.get(f"{PREFIX}/storedattachment/{blobless.pk}/change/").content.decode()

    assert f"{name} (28 bytes, in private attachment storage)" in page
    assert f'href="/{name}' not in page
    assert f"/media/{name}" not in page
    assert "Currently:" not in page
    assert "none (no bytes stored)" in empty


# --- what a conversation delete removes ---------------------------------------------------


@pytest.fixture
def doomed(conv: StoredConversation) -> dict[str, Any]:
    """``conv`` quotes a private attachment (its own blob) and one another thread also quotes."""
    from django.utils import timezone

    from django_pydantic_agent.contrib.store.models import StoredRun

    default_storage.save("b/private", ContentFile(b"x" * 1536))
    private = StoredAttachment.objects.create(
        owner_id="42", name="private.pdf", file="b/private", size=1536
    )
    shared = StoredAttachment.objects.create(owner_id="42", name="shared.pdf", file="b/shared")
    other = StoredConversation.objects.create(owner_id="42", thread_id="thread-2", title="Rome")
    conv.attachments.add(private, shared)
    other.attachments.add(shared)
    StoredRun.objects.create(
        owner_id="42", run_id="r1", conversation_id="thread-1", started_at=timezone.now()
    )
    return {"private": private, "shared": shared, "other": other}


def test_delete_confirmation_lists_attachments_blobs_and_harness_rows(
    admin_client: Client, conv: StoredConversation, doomed: dict[str, Any]
) -> None:
    page = admin_client.get(f"{PREFIX}/storedconversation/{conv.pk}/delete/").content.decode()

    assert "<li>Attachments no other conversation quotes: 1</li>" in page
    assert "<li>Stored files freed: 1 (1.5 KiB)</li>" in page
    assert "<li>Agent runs: 1</li>" in page
    assert "Step events" not in page  # harness kinds with nothing to remove are left out
    private = doomed["private"]
    assert f'Attachment: <a href="{PREFIX}/storedattachment/{private.pk}/change/">' in page
    assert "shared.pdf" not in page  # "Rome" still quotes it
    assert StoredAttachment.objects.count() == 2  # a preview deletes nothing
    assert default_storage.exists("b/private")


def test_bulk_delete_confirmation_previews_the_selection_as_a_whole(
    admin_client: Client, conv: StoredConversation, doomed: dict[str, Any]
) -> None:
    response = admin_client.post(
        f"{PREFIX}/storedconversation/",
        {"action": "delete_selected", "_selected_action": [conv.pk, doomed["other"].pk]},
    )
    page = response.content.decode()

    assert response.status_code == 200
    assert "<li>Attachments no other conversation quotes: 2</li>" in page
    assert "<li>Stored files freed: 2 (1.5 KiB)</li>" in page
    assert "private.pdf" in page
    assert "shared.pdf" in page
    assert StoredConversation.objects.count() == 2


def test_confirmed_delete_removes_what_the_preview_listed(
    admin_client: Client, conv: StoredConversation, doomed: dict[str, Any], on_commit: OnCommit
) -> None:
    with on_commit(execute=True):
        response = admin_client.post(
            f"{PREFIX}/storedconversation/{conv.pk}/delete/", {"post": "yes"}
        )

    assert response.status_code == 302
    assert list(StoredAttachment.objects.values_list("name", flat=True)) == ["shared.pdf"]
    assert not default_storage.exists("b/private")


def test_delete_preview_is_capped_and_unlinked_without_attachment_view_permission(
    conv: StoredConversation, django_user_model: type[User], monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.models import Permission

    monkeypatch.setattr("django_pydantic_agent.contrib.store.admin._DOOMED_SHOWN", 2)
    for name in ("a.txt", "b.txt", "c.txt"):
        conv.attachments.add(StoredAttachment.objects.create(owner_id="42", name=name))
    user = django_user_model.objects.create_user("mod", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            codename__in=["view_storedconversation", "delete_storedconversation"]
        )
    )
    client = Client()
    client.force_login(user)

    page = client.get(f"{PREFIX}/storedconversation/{conv.pk}/delete/").content.decode()

    assert "<li>Attachment: a.txt</li>" in page
    assert "<li>Attachment: b.txt</li>" in page
    assert "c.txt" not in page
    assert "\u2026 and more attachments" in page
    assert "<li>Attachments no other conversation quotes: 3</li>" in page
    assert "<li>Stored files freed: 0 (0 bytes)</li>" in page
