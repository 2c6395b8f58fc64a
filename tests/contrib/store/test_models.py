"""Models and migrations of contrib.store."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.files.base import ContentFile
from django.core.management import call_command

import django_pydantic_agent.contrib.store as store_package
from django_pydantic_agent.contrib.store import stores
from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    StoredConversationAttachment,
    StoredMessage,
    attachment_storage,
)

pytestmark = pytest.mark.django_db


def test_migrations_reflect_the_models() -> None:
    out = io.StringIO()
    call_command(
        "makemigrations", "django_pydantic_agent_store", "--check", "--dry-run", stdout=out
    )
    assert "No changes detected" in out.getvalue()


def test_thread_list_index_leads_with_the_owner() -> None:
    [index] = [i for i in StoredConversation._meta.indexes if i.name == "dpa_store_conv_owner_upd"]
    assert index.fields == ["owner_id", "-updated_at", "-id"]
    [hash_index] = [i for i in StoredAttachment._meta.indexes if "sha256" in i.fields]
    assert hash_index.fields[0] == "owner_id"


def test_string_forms() -> None:
    conv = StoredConversation.objects.create(owner_id="1", thread_id="t-1")
    assert str(conv) == "t-1"
    conv.title = "Trip"
    assert str(conv) == "Trip"
    message = StoredMessage.objects.create(
        conversation=conv, position=3, role="user", message_uuid=uuid.uuid4()
    )
    assert str(message) == "user #3"
    assert str(StoredMessage(position=0)) == "message #0"
    attachment = StoredAttachment.objects.create(owner_id="1")
    assert str(attachment) == attachment.attachment_id.hex
    attachment.name = "a.pdf"
    assert str(attachment) == "a.pdf"
    link = StoredConversationAttachment.objects.create(conversation=conv, attachment=attachment)
    assert str(link) == f"{conv.pk} \u2192 {attachment.pk}"


def test_storage_proxy_opens_through_the_resolved_storage() -> None:
    name = attachment_storage().save("x/blob", ContentFile(b"bytes"))
    with attachment_storage().open(name) as handle:
        assert handle.read() == b"bytes"


def test_package_import_loads_no_models_and_stores_export_lazily() -> None:
    pytest.importorskip(
        "pydantic_ai_harness",
        reason='needs the harness extra: pip install -e ".[harness]"',
    )
    assert not hasattr(store_package, "StoredConversation")
    from django_pydantic_agent.contrib.store import harness

    assert stores.DefaultStepStore is harness.DefaultStepStore
    assert stores.DefaultMemoryStore is harness.DefaultMemoryStore
    with pytest.raises(AttributeError, match="NoSuchStore"):
        _ = stores.NoSuchStore
    assert stores.__all__ == sorted(stores.__all__)
