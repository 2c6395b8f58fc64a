"""``manage.py ensure_demo_user``: create or refresh the demo account and print its login."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

DEFAULT_USERNAME = "demo"
DEFAULT_PASSWORD = "demo-password"


class Command(BaseCommand):
    """Make sure the demo user exists, is active and has the configured password.

    Running it again changes nothing but the password, which is set to the configured one, so
    the printed credentials are always the ones that work. The username and password come from
    ``--username``/``--password``, then ``DEMO_USERNAME``/``DEMO_PASSWORD``, then
    ``demo``/``demo-password``.
    """

    help = "Create or refresh the demo user and print its credentials."
    requires_system_checks: list[str] = []  # migrate, which runs first, has checked

    def add_arguments(self, parser: CommandParser) -> None:
        """Accept an explicit username and password."""
        parser.add_argument("--username", default=None, help="default: $DEMO_USERNAME or demo")
        parser.add_argument(
            "--password", default=None, help="default: $DEMO_PASSWORD or demo-password"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Create or update the user, then print how to log in."""
        username = options["username"] or os.environ.get("DEMO_USERNAME") or DEFAULT_USERNAME
        password = options["password"] or os.environ.get("DEMO_PASSWORD") or DEFAULT_PASSWORD
        user_model = get_user_model()
        lookup: dict[str, Any] = {user_model.USERNAME_FIELD: username}
        with transaction.atomic():
            user = user_model._default_manager.filter(**lookup).first()
            created = user is None
            if user is None:
                user = user_model(**lookup)
            changed = created or not user.is_active or not user.check_password(password)
            if changed:
                user.is_active = True
                user.set_password(password)
                user.save()
        state = "created" if created else ("updated" if changed else "already up to date")
        self.stdout.write(self.style.SUCCESS(f"Demo user {username!r} {state}."))
        self.stdout.write(f"  username: {username}")
        self.stdout.write(f"  password: {password}")
