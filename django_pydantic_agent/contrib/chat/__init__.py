"""A chat page any Django project can mount (add to ``INSTALLED_APPS``).

``ChatView.as_view(server=server)`` serves the whole page; ``{% agent_chat "agent" %}`` (from
``{% load agent_chat %}``) puts the chat into a page of the project's own. Both render
``agent_chat/chat.html``: ES modules and CSS under ``static/agent_chat/``, no build step, no CDN.
"""
