"""Who owns a row, as the admin shows it: the ``owner`` column every store admin has.

The user's name linked to their admin page when the owner id is a user pk, "anonymous
session" for ``anon:<session_key>`` owners (never the key itself), and the raw id otherwise.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html

if TYPE_CHECKING:
    from django.contrib.admin.views.main import ChangeList
    from django.http import HttpRequest
    from django.utils.safestring import SafeString

__all__ = ["OwnerColumnMixin", "owner_label", "users_by_owner_id"]

_ANON_PREFIX = "anon:"
# Set on each row of a changelist page: the owner's user, or None (no such user).
_OWNER_ATTR = "_dpa_owner_user"
_UNSET = object()


def users_by_owner_id(owner_ids: Any) -> dict[str, Any]:
    """Map each owner id of ``owner_ids`` that is a user's pk (``str(pk)``) to that user.

    One query for all of them. Anonymous owners (``anon:...``), ids that are not a valid pk
    of the user model, and pks of deleted users are simply missing from the result.
    """
    user_model = get_user_model()
    pk_field = user_model._meta.pk
    assert pk_field is not None
    pks = []
    for owner_id in set(owner_ids):
        if owner_id.startswith(_ANON_PREFIX):
            continue
        try:
            pk = pk_field.to_python(owner_id)
        except ValidationError:
            continue
        if str(pk) == owner_id:  # "01" is not user 1's owner id
            pks.append(pk)
    if not pks:
        return {}
    return {str(user.pk): user for user in user_model._default_manager.filter(pk__in=pks)}


def owner_label(admin_site: admin.AdminSite, owner_id: str, user: Any) -> SafeString | str:
    """How the admin shows an owner: ``user`` linked to its admin page, an anonymous session
    (with a short fingerprint that tells sessions apart, never the key), or the raw id."""
    if user is not None:
        name = user.get_username()
        if not admin_site.is_registered(type(user)):
            return str(name)
        opts = user._meta
        url = reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=[user.pk],
            current_app=admin_site.name,
        )
        return format_html('<a href="{}">{}</a>', url, name)
    if not owner_id:
        return "no owner"
    if owner_id.startswith(_ANON_PREFIX):
        digest = hashlib.sha256(owner_id.encode()).hexdigest()[:8]
        return format_html(
            '<span title="A visitor without an account, known by a session cookie; '
            'the code tells sessions apart">anonymous session {}</span>',
            digest,
        )
    return owner_id


class OwnerColumnMixin:
    """The read-only ``owner`` column and field for models with an ``owner_id``.

    On a changelist page the owners' users are loaded in one query for the whole page
    (``get_changelist_instance``), never one per row.
    """

    admin_site: admin.AdminSite

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        changelist: ChangeList = super().get_changelist_instance(request)  # type: ignore[misc]
        rows = list(changelist.result_list)  # evaluated once; the template reuses the cache
        users = users_by_owner_id(row.owner_id for row in rows)
        for row in rows:
            setattr(row, _OWNER_ATTR, users.get(row.owner_id))
        return changelist

    @admin.display(description="owner", ordering="owner_id")
    def owner(self, obj: Any) -> SafeString | str:
        user = getattr(obj, _OWNER_ATTR, _UNSET)
        if user is _UNSET:  # a change page: one row, one query
            user = users_by_owner_id([obj.owner_id]).get(obj.owner_id)
        return owner_label(self.admin_site, obj.owner_id, user)

    @admin.display(description="owner id")
    def owner_id_text(self, obj: Any) -> str:
        """The raw owner id for a change page, except an anonymous owner's session key, which
        is a credential (docs/security.md): it is never sent to a browser, the admin's included."""
        if obj.owner_id.startswith(_ANON_PREFIX):
            return f"{_ANON_PREFIX}\u2026 (a session key, not shown)"
        return str(obj.owner_id)
