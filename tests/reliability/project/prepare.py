"""``python -m tests.reliability.project.prepare USER...``: migrate, then create the users."""

from __future__ import annotations

import os
import sys

import django


def main(usernames: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.reliability.project.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    for name in usernames:
        get_user_model().objects.get_or_create(username=name)


if __name__ == "__main__":
    main(sys.argv[1:])
