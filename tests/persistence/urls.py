"""Views that use a session store the way a streaming transport does."""

from __future__ import annotations

from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

from django_pydantic_agent.persistence import (
    Conversation,
    DjangoSessionConversationStore,
    aensure_session_key,
)

store = DjangoSessionConversationStore()


async def stream_then_save(request: HttpRequest) -> StreamingHttpResponse:
    # As the AG-UI server does: the session exists before the headers go out...
    await aensure_session_key(request)

    async def body() -> AsyncIterator[bytes]:
        yield b"data: started\n\n"
        # ...and the conversation is saved only once the stream is under way, after
        # SessionMiddleware.process_response has already run.
        messages = [{"id": "m1", "role": "user", "content": "saved while streaming"}]
        await store.save(Conversation(thread_id="streamed", messages=messages), request=request)
        yield b"data: finished\n\n"

    return StreamingHttpResponse(body(), content_type="text/event-stream")


async def thread_list(request: HttpRequest) -> HttpResponse:
    rows = await store.list(request=request)
    return JsonResponse({"threads": [{"id": row.thread_id, "title": row.title} for row in rows]})


urlpatterns = [
    path("stream/", stream_then_save),
    path("threads/", thread_list),
]
