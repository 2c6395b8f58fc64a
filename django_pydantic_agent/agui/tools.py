"""Tools an agent served by ``AGUIServer`` can be given: ``read_attachment``.

``read_attachment`` lets the model read a file the user attached (the ``id`` of an
``attachments`` entry on a user message). It reads through the mount's attachment store with
the run's request, so it sees only the caller's own files: another owner's id reads exactly
like a missing one. Text comes back as text; anything else as pydantic-ai ``BinaryContent``,
the model's file part (images, PDFs, audio).

Give it to the agent as a plain tool, reading the store from the default deps
(``AgentDeps.attachment_store``, filled in by the server)::

    agent = Agent("openai:gpt-4o", deps_type=AgentDeps, tools=[read_attachment])

or, with deps of your own, as a toolset bound to the store: ``attachment_toolset(store)``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from pydantic_ai import BinaryContent, ModelRetry, RunContext
from pydantic_ai.toolsets import FunctionToolset

from django_pydantic_agent.persistence import AttachmentStore

__all__ = ["MAX_ATTACHMENT_READ_BYTES", "attachment_toolset", "read_attachment", "read_from"]

#: The most bytes ``read_attachment`` hands the model; a larger file is refused (ModelRetry).
MAX_ATTACHMENT_READ_BYTES: Final[int] = 10 * 1024 * 1024

_TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/csv")


def _is_text(mime: str) -> bool:
    mime = mime.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _TEXT_TYPES


async def read_from(
    store: AttachmentStore, attachment_id: str, *, request: Any
) -> str | BinaryContent:
    """The attachment ``attachment_id`` of ``request``'s owner, as the model should see it.

    Raises ``ModelRetry`` (the model is told, and may try another id) when no such attachment
    is the caller's, or when it is over ``MAX_ATTACHMENT_READ_BYTES``.
    """
    opened = await store.open(attachment_id, request=request)
    if opened is None:
        raise ModelRetry(
            f"There is no attachment {attachment_id!r}; use the id of a file the user attached."
        )

    def read() -> bytes:
        with opened.content as content:
            return content.read(MAX_ATTACHMENT_READ_BYTES + 1)

    data = await asyncio.to_thread(read)
    if len(data) > MAX_ATTACHMENT_READ_BYTES:
        raise ModelRetry(
            f"Attachment {attachment_id!r} is larger than {MAX_ATTACHMENT_READ_BYTES} bytes, "
            "too large to read whole."
        )
    mime = opened.ref.mime or "application/octet-stream"
    if _is_text(mime):
        return data.decode("utf-8", errors="replace")
    return BinaryContent(data=data, media_type=mime, identifier=opened.ref.id)


async def read_attachment(ctx: RunContext[Any], attachment_id: str) -> str | BinaryContent:
    """Read a file the user attached to the conversation, by its attachment id.

    Args:
        attachment_id: The ``id`` of an entry in a user message's ``attachments``.
    """
    store = getattr(ctx.deps, "attachment_store", None)
    request = getattr(ctx.deps, "request", None)
    if store is None or request is None:
        raise RuntimeError(
            "read_attachment needs deps with attachment_store and request (AgentDeps from an "
            "AGUIServer with an attachment store); with deps of your own, give the agent "
            "attachment_toolset(store) instead."
        )
    return await read_from(store, attachment_id, request=request)


def attachment_toolset(store: AttachmentStore) -> FunctionToolset[Any]:
    """A toolset holding ``read_attachment`` bound to ``store``.

    The run's deps must carry the acting ``request`` (``ctx.deps.request``), which scopes every
    read to its owner.
    """
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool(name="read_attachment")
    async def _read(ctx: RunContext[Any], attachment_id: str) -> str | BinaryContent:
        """Read a file the user attached to the conversation, by its attachment id.

        Args:
            attachment_id: The ``id`` of an entry in a user message's ``attachments``.
        """
        request = getattr(ctx.deps, "request", None)
        if request is None:
            raise RuntimeError("attachment_toolset needs deps with the acting request.")
        return await read_from(store, attachment_id, request=request)

    return toolset
