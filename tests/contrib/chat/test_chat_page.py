"""``docs/chat-page.md`` runs as printed: the page mounts in two lines, or through the tag.

The URLconf of the page is executed as a module and mounted with ``override_settings``; the
settings line is checked against the test settings, which install the app the same way.
"""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.template import Context, Template
from django.test import Client, RequestFactory, override_settings

from django_pydantic_agent.contrib.chat.strings import MSGIDS, catalogue
from django_pydantic_agent.contrib.chat.views import ChatView

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "chat-page.md"
STATIC = ROOT / "django_pydantic_agent" / "contrib" / "chat" / "static" / "agent_chat"
URLCONF = "tests_contrib_chat_docs_urls"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


@pytest.fixture
def docs_urls() -> Iterator[types.ModuleType]:
    """The page's ``myproject/urls.py``, imported as a module and mounted as the URLconf."""
    (settings_block, urls_block) = _blocks("python")
    assert settings_block.strip().endswith(
        'INSTALLED_APPS += ["django_pydantic_agent.contrib.chat"]'
    )
    module = types.ModuleType(URLCONF)
    exec(compile(urls_block, "docs/chat-page.md", "exec"), module.__dict__)
    sys.modules[URLCONF] = module
    try:
        with override_settings(ROOT_URLCONF=URLCONF):
            yield module
    finally:
        del sys.modules[URLCONF]


def test_the_settings_line_is_what_the_tests_install() -> None:
    assert "django_pydantic_agent.contrib.chat" in settings.INSTALLED_APPS


def test_an_anonymous_visitor_is_sent_to_log_in(docs_urls: types.ModuleType) -> None:
    response = Client().get("/chat/")

    assert response.status_code == 302
    assert response["Location"].startswith(str(settings.LOGIN_URL))
    assert "next=/chat/" in response["Location"]


@pytest.mark.django_db
def test_the_login_route_of_the_page_logs_a_user_in_and_sends_them_back(
    docs_urls: types.ModuleType, django_user_model: Any
) -> None:
    """The page's URLconf serves ``LOGIN_URL`` (a ``startproject`` project serves nothing
    there) with Django's ``LoginView`` and contrib.chat's template; staff or not."""
    django_user_model.objects.create_user("reader", password="pw")
    client = Client(enforce_csrf_checks=True)

    sent = client.get("/chat/")
    form = client.get(sent["Location"])
    token = form.cookies["csrftoken"].value
    wrong = client.post(
        sent["Location"],
        {"csrfmiddlewaretoken": token, "username": "reader", "password": "no", "next": "/chat/"},
    )
    logged_in = client.post(
        sent["Location"],
        {"csrfmiddlewaretoken": token, "username": "reader", "password": "pw", "next": "/chat/"},
    )
    page = client.get("/chat/")

    assert sent["Location"] == "/accounts/login/?next=/chat/"
    assert form.status_code == 200
    assert [t.name for t in form.templates][:2] == ["agent_chat/login.html", "agent_chat/page.html"]
    html = form.content.decode()
    assert 'href="/static/agent_chat/chat.css"' in html
    assert '<input type="hidden" name="next" value="/chat/">' in html
    assert 'name="username"' in html
    assert 'name="password"' in html
    assert "<script" not in html, "the login page runs no chat script"
    assert wrong.status_code == 200
    assert 'class="form-error" role="alert"' in wrong.content.decode()
    assert logged_in.status_code == 302
    assert logged_in["Location"] == "/chat/"
    assert page.status_code == 200


@pytest.mark.django_db
def test_the_mounted_page_talks_to_its_server(
    docs_urls: types.ModuleType, django_user_model: Any
) -> None:
    user = django_user_model.objects.create_user("reader", password="pw")
    client = Client()
    client.force_login(user)

    response = client.get("/chat/")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-agent-url="/agent/"' in html
    # The upload limits are the server's own (the defaults: 10 MiB, any type).
    assert 'data-upload-url="/agent/attachments/"' in html
    assert f'data-upload-max-bytes="{docs_urls.server.attachments.max_bytes}"' in html
    token = re.search(r'data-csrf-token="([^"]+)"', html)
    assert token is not None
    assert "csrftoken" in response.cookies
    assert '<script type="module" src="/static/agent_chat/chat.js"></script>' in html
    assert 'href="/static/agent_chat/chat.css"' in html
    assert "<title>Chat</title>" in html
    strings = re.search(r'<script id="agent-chat-strings" [^>]*>(.*?)</script>', html)
    assert strings is not None
    assert json.loads(strings.group(1))["Writing…"] == "Writing…"


@pytest.mark.django_db
def test_the_template_tag_puts_the_chat_into_a_page(
    docs_urls: types.ModuleType, django_user_model: Any
) -> None:
    (snippet,) = _blocks("django")
    request = RequestFactory().get("/mine/")
    request.user = django_user_model.objects.create_user("tagged", password="pw")

    html = Template(snippet).render(Context({"request": request}))

    assert '<main class="my-layout">' in html
    assert 'class="app embedded"' in html
    assert 'data-agent-url="/agent/"' in html
    assert 'href="/static/agent_chat/chat.css"' in html
    assert "/static/agent_chat/chat.js" in html


def test_the_tag_names_a_namespace_without_a_server(docs_urls: types.ModuleType) -> None:
    request = RequestFactory().get("/mine/")

    with pytest.raises(ImproperlyConfigured, match="'support'"):
        Template('{% load agent_chat %}{% agent_chat "support" %}').render(
            Context({"request": request})
        )


@pytest.mark.django_db
def test_a_view_without_a_server_says_how_to_give_it_one(
    docs_urls: types.ModuleType, django_user_model: Any
) -> None:
    request = RequestFactory().get("/chat/")
    request.user = django_user_model.objects.create_user("lost", password="pw")

    with pytest.raises(ImproperlyConfigured, match=r"ChatView.as_view\(server=server\)"):
        ChatView.as_view()(request)


def test_every_string_the_scripts_show_is_marked_for_translation() -> None:
    used = set()
    for script in [STATIC / "chat.js", *sorted((STATIC / "modules").glob("*.js"))]:
        used |= set(re.findall(r'\bt\("((?:[^"\\]|\\.)*)"', script.read_text(encoding="utf-8")))

    assert used, "the scripts translate nothing"
    assert used <= set(MSGIDS), sorted(used - set(MSGIDS))
    assert set(catalogue()) == set(MSGIDS)


def test_the_scripts_have_no_html_parsing_sink() -> None:
    sinks = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|DOMParser|"
        r"createContextualFragment|srcdoc|\beval\(|new Function"
    )
    found = []
    for script in [STATIC / "chat.js", *sorted((STATIC / "modules").glob("*.js"))]:
        for number, line in enumerate(script.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("//", 1)[0]
            if sinks.search(code):
                found.append(f"{script.name}:{number}: {line.strip()}")

    assert found == []
