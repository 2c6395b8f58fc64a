"""The conversation page lists a branched thread as its tree: each version an edit or a
regenerate made indented under the message it follows, the active branch marked."""

from __future__ import annotations

import re
import uuid
from html import unescape
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.test.client import RequestFactory

from django_pydantic_agent.chat_history import MessageCreate
from django_pydantic_agent.contrib.store.admin.tree import PLACE_ATTR, TreePlace, tree_order
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation

pytestmark = pytest.mark.django_db(transaction=True)
PREFIX = "/admin/django_pydantic_agent_store"

SAVED = [
    {"id": "u1", "role": "user", "content": "Plan a trip"},
    {"id": "a1", "role": "assistant", "content": "Where to?"},
    {"id": "u2", "role": "user", "content": "Lisbon"},
    {"id": "a2", "role": "assistant", "content": "Lisbon it is."},
]


def _branched(user: User) -> StoredConversation:
    """``SAVED``, then ``u2`` edited (``u2b``, answered ``a2b``), then ``a2b`` regenerated
    (``a2c``): positions 0, 1, 2, 3, 2, 3, 3 on branches 0, 0, 0, 0, 1, 1, 2."""
    store = DefaultConversationStore()
    request = RequestFactory().post("/agent/")
    request.user = user

    async def write() -> None:
        await store.save(Conversation(thread_id="t", messages=SAVED), request=request)
        chats, messages = await store.repositories(request=request)
        chat = await chats.get_chat_by_thread_id(chats.user_uuid, "t")
        assert chat is not None

        async def branch(at: int, *turns: tuple[str, str, str]) -> None:
            history = await messages.get_chat_messages(chat.chat_uuid)
            async with messages.transaction():
                await messages.start_branch(chat.chat_uuid, history[at].message_uuid)
                for agui_id, role, content in turns:
                    await messages.create_message(
                        MessageCreate(
                            chat_uuid=chat.chat_uuid, role=role, content=content, agui_id=agui_id
                        )
                    )

        await branch(2, ("u2b", "user", "Porto"), ("a2b", "assistant", "Porto it is."))
        await branch(3, ("a2c", "assistant", "Porto, then."))

    async_to_sync(write)()
    return StoredConversation.objects.get(thread_id="t")


def _rows(html: str) -> list[tuple[str, str, str]]:
    """Each message row of the page: (position cell, branch cell, message id), as text."""
    table = html.split('class="dpa-messages"', 1)[1].split("</table>", 1)[0]
    rows = []
    for row in re.findall(r"<tr class=\"form-row.*?</tr>", table, re.DOTALL):
        cells = re.findall(r'<td class="field-(\w+)"><div>(.*?)</div></td>', row, re.DOTALL)
        text = {
            name: " ".join(unescape(re.sub(r"<[^>]+>", " ", body)).split()) for name, body in cells
        }
        [message_id] = re.findall(r'class="quiet">([^<]+)</span>', dict(cells)["message"])[:1]
        rows.append((text["place"], text["branch_mark"], message_id))
    return rows


def test_a_branched_thread_reads_as_a_tree_with_its_active_branch_marked(
    admin_client: Client, alice: User
) -> None:
    conversation = _branched(alice)
    assert list(
        StoredMessage.objects.filter(conversation=conversation)
        .order_by("-active", "position", "branch")
        .values_list("position", flat=True)
    ) == [0, 1, 2, 3, 2, 3, 3]  # what the page listed, flat

    page = admin_client.get(f"{PREFIX}/storedconversation/{conversation.pk}/change/")

    assert page.status_code == 200
    assert _rows(page.content.decode()) == [
        ("0", "● active", "u1"),
        ("1", "● active", "a1"),
        # The edit made two versions of the second question, each with what followed it.
        ("↳ 2", "branch 0 version 1 of 2", "u2"),
        ("↳ 3", "branch 0", "a2"),
        ("↳ 2", "● active version 2 of 2", "u2b"),
        # The regenerate made two versions of its answer, one level further in.
        ("↳ 3", "branch 1 version 1 of 2", "a2b"),
        ("↳ 3", "● active version 2 of 2", "a2c"),
    ]
    html = page.content.decode()
    assert html.count('class="dpa-depth-2"') == 2
    assert html.count("dpa-inactive") == 3


def test_a_thread_that_never_branched_keeps_its_order_and_no_indentation(
    admin_client: Client, alice: User
) -> None:
    store = DefaultConversationStore()
    request = RequestFactory().post("/agent/")
    request.user = alice
    async_to_sync(store.save)(Conversation(thread_id="t", messages=SAVED), request=request)
    conversation = StoredConversation.objects.get(thread_id="t")

    page = admin_client.get(f"{PREFIX}/storedconversation/{conversation.pk}/change/")

    assert _rows(page.content.decode()) == [
        (str(index), "● active", message["id"]) for index, message in enumerate(SAVED)
    ]
    assert "dpa-inactive" not in page.content.decode()


def test_a_first_message_edited_makes_two_roots_one_level_in() -> None:
    def row(pk: int, message_id: str, position: int, branch: int, active: bool) -> Any:
        return StoredMessage(
            pk=pk,
            message_uuid=uuid.uuid4(),
            message_id=message_id,
            position=position,
            branch=branch,
            active=active,
        )

    rows = [row(1, "u1", 0, 0, False), row(2, "a1", 1, 0, False), row(3, "u1b", 0, 1, True)]

    ordered = tree_order(rows)

    assert [r.message_id for r in ordered] == ["u1", "a1", "u1b"]
    assert [getattr(r, PLACE_ATTR) for r in ordered] == [
        TreePlace(depth=1, version=1, versions=2, active=False),
        TreePlace(depth=1, version=1, versions=1, active=False),
        TreePlace(depth=1, version=2, versions=2, active=True),
    ]
