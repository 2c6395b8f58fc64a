"""``manage.py ensure_demo_user``: create or refresh the demo accounts and print their logins."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.urls import NoReverseMatch, reverse

DEFAULT_USERNAME = "demo"
DEFAULT_PASSWORD = "demo-password"
#: The staff account of the demo (``settings.DEMO_ADMIN``): published, so never for a real site.
ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin-password"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"


class Command(BaseCommand):
    """Make sure the demo user exists, is active and has the configured password.

    Running it again changes nothing but the password, which is set to the configured one, so
    the printed credentials are always the ones that work. The username and password come from
    ``--username``/``--password``, then ``DEMO_USERNAME``/``DEMO_PASSWORD``, then
    ``demo``/``demo-password``.

    With ``settings.DEMO_ADMIN`` (on in the example's settings while ``DEBUG`` is), it also
    keeps a superuser ``admin`` / ``admin-password`` the same way and prints the admin's URL
    (under ``--base-url``), so the demo's admin needs no ``createsuperuser``.
    """

    help = "Create or refresh the demo user (and the demo admin) and print the credentials."
    requires_system_checks: list[str] = []  # migrate, which runs first, has checked

    def add_arguments(self, parser: CommandParser) -> None:
        """Accept an explicit username and password, and where the site is served."""
        parser.add_argument("--username", default=None, help="default: $DEMO_USERNAME or demo")
        parser.add_argument(
            "--password", default=None, help="default: $DEMO_PASSWORD or demo-password"
        )
        parser.add_argument(
            "--base-url",
            default=DEFAULT_BASE_URL,
            help=f"the site's address, for the admin URL (default {DEFAULT_BASE_URL})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Create or update the accounts, then print how to log in."""
        username = options["username"] or os.environ.get("DEMO_USERNAME") or DEFAULT_USERNAME
        password = options["password"] or os.environ.get("DEMO_PASSWORD") or DEFAULT_PASSWORD
        admin = bool(getattr(settings, "DEMO_ADMIN", False))
        if admin and username == ADMIN_USERNAME:
            raise CommandError(
                f"The demo user cannot be named {ADMIN_USERNAME!r}: that is the demo admin's "
                "account. Choose another --username (or DEMO_USERNAME)."
            )
        state = self._ensure(username, password, staff=False)
        self.stdout.write(self.style.SUCCESS(f"Demo user {username!r} {state}."))
        self.stdout.write(f"  username: {username}")
        self.stdout.write(f"  password: {password}")
        if not admin:
            return
        state = self._ensure(ADMIN_USERNAME, ADMIN_PASSWORD, staff=True)
        self.stdout.write(self.style.SUCCESS(f"Demo admin {ADMIN_USERNAME!r} {state}."))
        self.stdout.write(f"  username: {ADMIN_USERNAME}")
        self.stdout.write(f"  password: {ADMIN_PASSWORD}")
        try:
            path = reverse("admin:index")
        except NoReverseMatch:
            self.stdout.write("  (the admin is not in this project's URLs)")
        else:
            self.stdout.write(f"  admin: {options['base_url'].rstrip('/')}{path}")

    @staticmethod
    def _ensure(username: str, password: str, *, staff: bool) -> str:
        """Create or refresh one account; ``staff`` makes it an active superuser too."""
        user_model = get_user_model()
        lookup: dict[str, Any] = {user_model.USERNAME_FIELD: username}
        with transaction.atomic():
            user = user_model._default_manager.filter(**lookup).first()
            created = user is None
            if user is None:
                user = user_model(**lookup)
            changed = created or not user.is_active or not user.check_password(password)
            if staff and not (user.is_staff and user.is_superuser):
                changed = True
            if changed:
                user.is_active = True
                if staff:
                    user.is_staff = user.is_superuser = True
                user.set_password(password)
                user.save()
        return "created" if created else ("updated" if changed else "already up to date")
