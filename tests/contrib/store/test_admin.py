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

pytestmark = pytest.mark.django_db
OnCommit = Callable[..., Any]
PREFIX = "/admin/django_pydantic_agent_store"


@pytest.fixture
def conv() -> StoredConversation:
    row = StoredConversation.objects.create(owner_id="42", thread_id="thread-1", title="Paris trip")
    StoredMessage.objects.create(
        conversation=row, position=0, role="user", message_id="m0", data={"content": "<b>hi</b>"}
    )
    return row


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

    assert "&lt;b&gt;hi&lt;/b&gt;" in page  # escaped wire JSON
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


def test_huge_messages_are_cut_on_the_admin_page(
    admin_client: Client, conv: StoredConversation
) -> None:
    StoredMessage.objects.create(
        conversation=conv, position=1, role="user", data={"content": "x" * 100_000}
    )
    page = admin_client.get(f"{PREFIX}/storedconversation/{conv.pk}/change/").content.decode()
    assert "x" * 100_000 not in page
    assert "characters in all)" in page
