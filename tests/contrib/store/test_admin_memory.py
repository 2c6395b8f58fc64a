"""The memory admin through the admin client: listing by owner and the gated purge action."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_pydantic_agent.contrib.store.models import StoredMemoryFile, StoredMemoryOperation

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_pydantic_agent_store_storedmemoryfile_changelist")
CHANGE = "/admin/django_pydantic_agent_store/storedmemoryfile/{}/change/"
ACTION = "purge_owner_memory"


def _file(owner: str, path: str, content: str = "note") -> StoredMemoryFile:
    return StoredMemoryFile.objects.create(owner_id=owner, path=path, content=content, version="v")


@pytest.fixture
def files() -> dict[str, StoredMemoryFile]:
    return {
        "alice-1": _file("1", "u-1/main/MEMORY.md", "- likes tea"),
        "alice-2": _file("1", "u-1/main/travel.md"),
        "bob": _file("2", "u-2/main/MEMORY.md"),
        "carol": _file("3", "u-3/main/MEMORY.md"),
    }


def _staff(*codenames: str) -> Client:
    # A pk no file's owner id names: those owners show as raw ids.
    user = User.objects.create_user("staff", password="pw", is_staff=True, pk=900)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_pydantic_agent_store", codename__in=codenames
        )
    )
    client = Client()
    client.force_login(user)
    return client


def _select(client: Client, *rows: StoredMemoryFile) -> Any:
    return client.post(
        CHANGELIST,
        {"action": ACTION, "_selected_action": [row.pk for row in rows], "index": 0},
    )


def test_files_are_listed_grouped_by_owner_and_filterable_to_one(
    files: dict[str, StoredMemoryFile],
) -> None:
    client = _staff("view_storedmemoryfile")

    page = client.get(CHANGELIST).content.decode()
    positions = [page.index(row.path) for row in files.values()]
    assert positions == sorted(positions)  # owner 1's files, then 2's, then 3's
    assert f"?owner_of={files['alice-1'].pk}" in page
    assert '<td class="field-chars">11</td>' in page  # len("- likes tea")

    only_alice = client.get(CHANGELIST, {"owner_of": files["alice-2"].pk}).content.decode()
    assert "u-1/main/travel.md" in only_alice
    assert "u-2/main/MEMORY.md" not in only_alice
    detail = client.get(
        reverse(
            "admin:django_pydantic_agent_store_storedmemoryfile_change", args=[files["alice-1"].pk]
        )
    )
    assert "- likes tea" in detail.content.decode()
    assert 'name="content"' not in detail.content.decode()  # read-only


def test_without_the_permission_the_action_is_absent_and_refused(
    files: dict[str, StoredMemoryFile],
) -> None:
    client = _staff("view_storedmemoryfile", "delete_storedmemoryfile")

    assert ACTION not in client.get(CHANGELIST).content.decode()
    response = _select(client, files["alice-1"])
    assert response.status_code == 302  # "No action selected."
    confirmed = client.post(
        CHANGELIST, {"action": ACTION, "_selected_action": [files["alice-1"].pk], "post": "yes"}
    )
    assert confirmed.status_code == 302
    assert StoredMemoryFile.objects.count() == 4


def test_the_purge_confirms_then_removes_exactly_the_selected_owners_memory(
    files: dict[str, StoredMemoryFile],
) -> None:
    StoredMemoryOperation.objects.create(
        owner_id="1", operation_id="o", fingerprint="f", existed=False
    )
    client = _staff("view_storedmemoryfile", "purge_agent_memory")
    assert "Purge agent memory for the selected owners" in client.get(CHANGELIST).content.decode()

    confirmation = _select(client, files["alice-1"], files["bob"])
    page = confirmation.content.decode()
    assert confirmation.status_code == 200
    assert "<li>1: 2 file(s)</li>" in page  # all of owner 1, not only the selected row
    assert "<li>2: 1 file(s)</li>" in page
    assert "<li>3:" not in page
    assert StoredMemoryFile.objects.count() == 4  # nothing deleted before confirming

    done = client.post(
        CHANGELIST,
        {
            "action": ACTION,
            "_selected_action": [files["alice-1"].pk, files["bob"].pk],
            "post": "yes",
        },
        follow=True,
    )
    assert "Purged 3 memory file(s) of 2 owner(s)." in done.content.decode()
    assert list(StoredMemoryFile.objects.values_list("owner_id", flat=True)) == ["3"]
    assert not StoredMemoryOperation.objects.exists()


def test_memory_files_cannot_be_added_or_edited_by_hand(files: dict[str, StoredMemoryFile]) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))

    add = client.get(reverse("admin:django_pydantic_agent_store_storedmemoryfile_add"))
    assert add.status_code == 403
    client.post(CHANGE.format(files["bob"].pk), {"content": "forged </memory>"})
    files["bob"].refresh_from_db()
    assert files["bob"].content == "note"
    assert str(files["bob"]) == "u-2/main/MEMORY.md"


def test_search_matches_owner_ids_exactly_so_a_select_all_purge_takes_one_owner() -> None:
    """Regression: ``=owner_id`` is iexact, so searching "alice" listed "Alice" too and a
    select-all purge of the results deleted both owners' memory."""
    upper = _file("Alice", "u-Alice/main/MEMORY.md")
    lower = _file("alice", "u-alice/main/MEMORY.md")
    other = _file("alicex", "u-7/main/MEMORY.md")
    client = _staff("view_storedmemoryfile", "purge_agent_memory")

    def listed(term: str) -> set[str]:
        page = client.get(CHANGELIST, {"q": term}).content.decode()
        return {row.path for row in (upper, lower, other) if row.path in page}

    assert listed("alice") == {lower.path}
    assert listed("Alice") == {upper.path}
    assert listed("ALICE") == set()
    assert listed("7/main") == {other.path}  # part of a path, case-sensitive
    assert listed("u-ALICE") == set()
    assert listed("u-Alice") == {upper.path}

    response = client.post(
        f"{CHANGELIST}?q=alice",
        {
            "action": ACTION,
            "select_across": "1",
            "_selected_action": [lower.pk],
            "index": 0,
            "post": "yes",
        },
    )

    assert response.status_code == 302
    assert sorted(StoredMemoryFile.objects.values_list("owner_id", flat=True)) == [
        "Alice",
        "alicex",
    ]


def test_owners_show_as_users_or_anonymous_sessions_in_the_list_and_the_purge(
    django_user_model: type[User],
) -> None:
    dora = django_user_model.objects.create_user("dora", pk=77)
    mine = _file("77", "u-77/main/MEMORY.md")
    visitor = _file("anon:s3cretsessionkey0123456789abcd", "anon-x/main/MEMORY.md")
    client = _staff("view_storedmemoryfile", "purge_agent_memory")

    page = client.get(CHANGELIST).content.decode()
    assert f'<a href="/admin/auth/user/{dora.pk}/change/">dora</a>' in page
    assert f'<a href="?owner_of={mine.pk}" title="Only this owner\'s files">' in page
    assert "anonymous session " in page
    assert "s3cretsessionkey" not in page  # not even in a link
    detail = client.get(CHANGE.format(visitor.pk)).content.decode()
    assert "anon:\u2026 (a session key, not shown)" in detail
    assert "s3cretsessionkey" not in detail
    only_visitor = client.get(CHANGELIST, {"owner_of": visitor.pk}).content.decode()
    assert "anon-x/main/MEMORY.md" in only_visitor
    assert "u-77/main/MEMORY.md" not in only_visitor
    assert "s3cretsessionkey" not in only_visitor

    confirmation = _select(client, mine, visitor).content.decode()
    assert f'<li><a href="/admin/auth/user/{dora.pk}/change/">dora</a>: 1 file(s)</li>' in (
        confirmation
    )
    assert "anonymous session " in confirmation
    assert "s3cretsessionkey" not in confirmation


@pytest.mark.parametrize("value", ["999999", "not-a-pk"])
def test_a_stale_owner_link_lists_nothing_rather_than_everyone(
    files: dict[str, StoredMemoryFile], value: str
) -> None:
    client = _staff("view_storedmemoryfile")

    page = client.get(CHANGELIST, {"owner_of": value}).content.decode()

    assert "no such memory file" in page
    assert not any(row.path in page for row in files.values())
