"""``VercelAITransport``'s construction, names and the attachment route, both ways."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory
from django.urls import reverse

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.vercel_ai import VercelAITransport
from tests.agui.agents import text_agent
from tests.agui.urls import stored

pytestmark = pytest.mark.urls("tests.vercel_ai.urls")


def test_the_routes_reverse_under_the_mount_without_a_trailing_slash() -> None:
    assert reverse("v-scripted-chat:chat") == "/s/api/chat"
    assert reverse("v-scripted-chat:thread", kwargs={"thread_id": "a b"}) == "/s/api/chat/a%20b"
    assert reverse("v-scripted-chat:stream", kwargs={"thread_id": "t"}) == "/s/api/chat/t/stream"
    assert reverse("v-scripted-chat:stop", kwargs={"thread_id": "t"}) == "/s/api/chat/t/stop"


def test_a_stateless_server_is_refused_at_construction() -> None:
    with pytest.raises(ImproperlyConfigured, match="needs an AGUIServer whose conversation store"):
        VercelAITransport(AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True)))


def test_attachment_urls_both_ways() -> None:
    mounted = VercelAITransport(stored(mount=MountOptions(namespace="v-scripted")))
    unmounted = VercelAITransport(stored(mount=MountOptions(namespace="nowhere")))
    no_uploads = VercelAITransport(
        AGUIServer(
            text_agent(),
            conversation_store=DefaultConversationStore(),
            access=AccessPolicy(csrf_exempt=True),
        )
    )
    request = RequestFactory().get("/")

    assert mounted._attachment_url({"id": "f1"}) == "/s/agent/attachments/f1/"
    assert unmounted._attachment_url({"id": "f1", "url": "https://cdn/f1"}) == "https://cdn/f1"
    assert unmounted._attachment_url({"id": "f1"}) is None
    for url in ("ftp://testserver/s/agent/attachments/f1/", "/s/agent/threads/f1/", "/nope/"):
        assert mounted._attachment_id(request)(url) is None
    assert no_uploads._attachment_id(request)("/s/agent/attachments/f1/") is None
