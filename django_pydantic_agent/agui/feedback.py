"""``PUT threads/<id>/messages/<message_id>/feedback/``: a thumbs up or down and a comment.

Mounted when the conversation store keeps feedback (``StoreFeatures.feedback``). Owner-scoped
like every thread route: another owner's thread or message is the same 404 as a missing one.
``GET threads/<id>/`` carries each rated message's ``feedback`` (``persistence.feedback``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.branches import MESSAGE_NOT_FOUND
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import read_json_object
from django_pydantic_agent.agui.owners import owns_nothing
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence import ConversationStore
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.feedback import (
    FeedbackError,
    RatesMessages,
    read_feedback,
)

__all__ = ["FeedbackEndpoints"]

_NOT_FOUND = "No such thread."
_TOO_BIG = 'send only {"rating": "up" | "down" | null, "comment": "..."}.'


class FeedbackEndpoints:
    """The feedback route over one conversation store (``body_limit()``: the JSON body cap)."""

    def __init__(self, store: ConversationStore, *, body_limit: Callable[[], int]) -> None:
        self._store = store
        self._body_limit = body_limit

    def routes(self) -> list[Route]:
        """``threads/<thread_id>/messages/<message_id>/feedback/``, mounted when the store
        keeps feedback."""
        return [
            Route(
                path="threads/<str:thread_id>/messages/<str:message_id>/feedback/",
                name="message-feedback",
                handlers={"PUT": self.put},
                not_found=_NOT_FOUND,
                too_big=_TOO_BIG,
                mounted=store_features(self._store).feedback,
            )
        ]

    async def put(self, request: HttpRequest, thread_id: str, message_id: str) -> HttpResponseBase:
        """200 ``{"threadId", "messageId", "feedback"}`` (``feedback`` ``null`` once cleared);
        400 for a bad body, 404 for a missing thread or message, 413/415 for the body."""
        payload = read_json_object(
            request,
            limit=self._body_limit(),
            too_big=_TOO_BIG,
            not_object='Send a JSON object: {"rating": "up" | "down" | null, "comment": "..."}.',
        )
        try:
            feedback = read_feedback(payload)
        except FeedbackError as exc:
            raise Refusal.invalid(request, str(exc)) from None
        store = self._store
        if await owns_nothing(request, store) or not implements(store, RatesMessages):
            raise Refusal(404, _NOT_FOUND)
        if not await store.rate(thread_id, message_id, feedback, request=request):
            if not await store.exists(thread_id, request=request):
                raise Refusal(404, _NOT_FOUND)
            raise Refusal(404, MESSAGE_NOT_FOUND)
        return JsonResponse(
            {
                "threadId": thread_id,
                "messageId": message_id,
                "feedback": None if feedback.empty else feedback.as_json(),
            }
        )
