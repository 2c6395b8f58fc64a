"""Feedback on a message: a thumbs up or down and a comment, kept by stores that can.

``PUT threads/<id>/messages/<message_id>/feedback/`` sets it (``agui.feedback``); ``GET
threads/<id>/`` and the export carry it as each message's ``feedback``. A store keeps it by
implementing ``RatesMessages`` (``StoreFeatures.feedback``); the page hides the thumbs on a
store that does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from django_pydantic_agent.chat_history.protocols import implements

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = [
    "FEEDBACK_COMMENT_MAX_CHARS",
    "Feedback",
    "FeedbackError",
    "RatesMessages",
    "read_feedback",
    "thread_feedback",
    "with_feedback",
]

#: The longest comment a rating may carry.
FEEDBACK_COMMENT_MAX_CHARS = 2000
_RATINGS = ("up", "down")

Rating = Literal["up", "down"]


class FeedbackError(ValueError):
    """A feedback body that cannot be kept; the message names the field and what to send."""


@dataclass(frozen=True)
class Feedback:
    """A rating (``"up"``, ``"down"`` or ``None``) and a comment (``""`` for none). A feedback
    with neither is empty: setting it clears the message's feedback."""

    rating: Rating | None = None
    comment: str = ""

    @property
    def empty(self) -> bool:
        """No rating and no comment."""
        return self.rating is None and not self.comment

    def as_json(self) -> dict[str, Any]:
        """``{"rating", "comment"}`` as the routes and the export write it."""
        return {"rating": self.rating, "comment": self.comment}


def read_feedback(payload: Any) -> Feedback:
    """The ``Feedback`` a request body or an export entry names: ``{"rating": "up" | "down" |
    null, "comment": "..."}`` (the comment optional). Raises ``FeedbackError`` naming the
    problem."""
    if not isinstance(payload, dict) or "rating" not in payload:
        raise FeedbackError(
            'Send a JSON object with a "rating" of "up", "down" or null, and optionally a '
            '"comment", e.g. {"rating": "down", "comment": "Wrong date"}.'
        )
    unknown = sorted(set(payload) - {"rating", "comment"})
    if unknown:
        raise FeedbackError(f'Unknown field "{unknown[0]}": feedback takes "rating" and "comment".')
    rating = payload["rating"]
    if rating is not None and rating not in _RATINGS:
        raise FeedbackError(f'"rating" is {rating!r}; send "up", "down" or null.')
    comment = payload.get("comment") or ""
    if not isinstance(comment, str):
        raise FeedbackError('"comment" must be a string.')
    if len(comment) > FEEDBACK_COMMENT_MAX_CHARS:
        raise FeedbackError(
            f'"comment" is {len(comment)} characters long; the limit is '
            f"{FEEDBACK_COMMENT_MAX_CHARS}."
        )
    if "\x00" in comment:
        raise FeedbackError('"comment" holds a NUL character; remove it.')
    return Feedback(rating=rating, comment=comment.strip())


@runtime_checkable
class RatesMessages(Protocol):
    """Optional: a store that keeps feedback on the messages of its threads."""

    async def rate(
        self, thread_id: str, message_id: str, feedback: Feedback, *, request: HttpRequest
    ) -> bool:
        """Set (an empty ``feedback``: clear) the feedback on the owner's message
        ``message_id`` of ``thread_id``, on any branch; ``False`` (nothing written) when the
        owner has no such thread or message."""
        ...

    async def ratings(self, thread_id: str, *, request: HttpRequest) -> dict[str, Feedback]:
        """The feedback on the owner's thread, by message id (``{}`` for none or no thread)."""
        ...


async def thread_feedback(
    store: object, thread_id: str, *, request: HttpRequest
) -> dict[str, Feedback]:
    """``store.ratings(...)`` for a store that keeps feedback, else ``{}``."""
    if implements(store, RatesMessages):
        return await store.ratings(thread_id, request=request)
    return {}


def with_feedback(messages: list[Any], ratings: dict[str, Feedback]) -> list[Any]:
    """``messages`` (wire dicts) with ``feedback`` on each one ``ratings`` names."""
    if not ratings:
        return messages
    return [
        {**m, "feedback": ratings[m["id"]].as_json()}
        if isinstance(m, dict) and m.get("id") in ratings
        else m
        for m in messages
    ]
