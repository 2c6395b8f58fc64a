"""``ChatView``: the whole chat page, mounted with ``ChatView.as_view(server=server)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext_lazy as _
from django.views.generic import TemplateView

from django_pydantic_agent.contrib.chat.context import chat_context, server_for

if TYPE_CHECKING:
    from django_pydantic_agent.agui import AGUIServer


class ChatView(TemplateView):
    """The chat page for one ``AGUIServer``.

    Every attribute can be passed to ``as_view``:
    ``ChatView.as_view(server=server, title="Support", login_required=False)``.
    """

    http_method_names = ["get", "head", "options"]
    template_name = "agent_chat/page.html"
    #: The AGUIServer the page talks to (its routes must be mounted, e.g. ``server.urls``).
    server: AGUIServer | None = None
    #: Instead of ``server``: the URL namespace of a mounted server.
    namespace: str | None = None
    #: The page's title and heading.
    title: Any = _("Chat")
    #: Whether an anonymous visitor is sent to ``settings.LOGIN_URL`` first.
    login_required: bool = True
    #: A template included in the top bar's right-hand side (an account menu), or ``None``.
    header_template: str | None = None
    #: A template for the empty conversation (a greeting, suggestion chips), or ``None``.
    empty_template: str | None = "agent_chat/empty.html"

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """Send an anonymous visitor to the login page when ``login_required``."""
        if self.login_required and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return super().dispatch(request, *args, **kwargs)

    def get_server(self) -> AGUIServer:
        """The server given to ``as_view``, or the one mounted under ``namespace``."""
        if self.server is not None:
            return self.server
        if self.namespace is not None:
            return server_for(self.namespace)
        raise ImproperlyConfigured(
            "ChatView needs the AGUIServer it talks to: ChatView.as_view(server=server), or "
            'ChatView.as_view(namespace="agent") for a server mounted with that namespace.'
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        """The template context: the server's routes and limits, title and included parts."""
        context = super().get_context_data(**kwargs)
        context.update(chat_context(self.request, self.get_server()))
        context.update(
            title=self.title,
            header_template=self.header_template,
            empty_template=self.empty_template,
        )
        return context
