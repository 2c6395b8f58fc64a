"""``{% agent_chat "agent" %}``: the chat inside a page of the project's own."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from django_pydantic_agent.contrib.chat.context import chat_context, server_for

register = template.Library()


@register.simple_tag(takes_context=True)
def agent_chat(
    context: template.Context,
    namespace: str = "agent",
    empty_template: str | None = "agent_chat/empty.html",
) -> SafeString:
    """Render the chat (stylesheet, script and markup) for the server mounted under ``namespace``.

    Put it once per page, inside ``<body>``; the page needs ``request`` in its context (the
    ``request`` context processor, on by default).
    """
    request = context["request"]
    values: dict[str, Any] = {
        **chat_context(request, server_for(namespace)),
        "empty_template": empty_template,
        "embedded": True,
    }
    return SafeString(render_to_string("agent_chat/chat.html", values, request=request))
