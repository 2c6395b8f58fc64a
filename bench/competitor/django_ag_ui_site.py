# mypy: ignore-errors
# (imported only by the django-ag-ui virtualenv's uvicorn, never by this package's tools)
"""django-ag-ui 0.70 serving the same 2,000-delta ``FunctionModel`` as ``bench.site``.

Run from its own virtualenv, with this directory on ``sys.path`` (``bench.competitor`` starts
it): ``uvicorn django_ag_ui_site:application --app-dir bench/competitor``. ``off/`` is its
default (no store, the client's history rides in each request); ``on/`` persists with
django-spec-agents' ``DefaultConversationStore``. ``BENCH_DIR`` holds its SQLite file, which
``python django_ag_ui_site.py migrate`` creates.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django
from django.conf import settings

from django_pydantic_agent.agui import AccessPolicy, MountOptions

DELTAS = int(os.environ.get("BENCH_DELTAS", "2000"))

settings.configure(
    SECRET_KEY="bench-only-not-secret",
    USE_TZ=True,
    ALLOWED_HOSTS=["*"],
    INSTALLED_APPS=[
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django_spec_agents.contrib.store",
    ],
    ROOT_URLCONF=__name__,
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(Path(os.environ["BENCH_DIR"]) / "django_ag_ui.sqlite3"),
        }
    },
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
)
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.urls import path  # noqa: E402
from django_ag_ui import AGUIServer, ToolRegistry  # noqa: E402
from django_spec_agents.contrib.store.default_conversation_store import (  # noqa: E402
    DefaultConversationStore,
)
from pydantic_ai.models.function import FunctionModel  # noqa: E402


async def stream(messages, info):
    for i in range(DELTAS):
        yield f"w{i} "


_user = []


async def bench_user(request):
    if not _user:
        _user.append(await get_user_model().objects.aget(username="bench"))
    return _user[0]


def mount(name, **options):
    server = AGUIServer(
        ToolRegistry(),
        model=FunctionModel(stream_function=stream),
        access=AccessPolicy(get_user=bench_user, csrf_exempt=True),
        mount=MountOptions(namespace=name),
        **options,
    )
    return path(f"{name}/", server.urls)


urlpatterns = [mount("off"), mount("on", conversation_store=DefaultConversationStore())]
application = get_asgi_application()

if __name__ == "__main__":
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    get_user_model().objects.get_or_create(username="bench")
    print(
        "django-ag-ui",
        sys.modules["django_ag_ui"].__version__
        if hasattr(sys.modules["django_ag_ui"], "__version__")
        else "",
    )
