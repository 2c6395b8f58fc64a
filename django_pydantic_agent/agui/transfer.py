"""Thread export and import routes (``persistence.transfer`` reads and writes the document).

``GET threads/<id>/export/?format=json`` answers the whole thread (every branch, status, tool
call, reasoning step, usage and attachment reference) as a download; ``?format=markdown`` the
active branch, readable. ``POST threads/import/`` takes such a JSON document and creates a new
thread of the caller: the whole document is checked first (400 naming the first problem,
nothing written), and nothing in it is trusted about ids, owners or attachments: the thread
gets a new id, every attachment reference must name an upload of the caller and is replaced
by the attachment store's own ref.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import read_json_object
from django_pydantic_agent.agui.input import ref_json
from django_pydantic_agent.agui.owners import ensure_anonymous_session, owns_nothing
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence import (
    AttachmentStore,
    ConversationStore,
    attachment_refs,
    is_persistent,
)
from django_pydantic_agent.persistence.branching import new_thread_id
from django_pydantic_agent.persistence.feedback import RatesMessages, read_feedback, thread_feedback
from django_pydantic_agent.persistence.transfer import (
    NOT_A_DOCUMENT,
    ImportProblem,
    attachment_holders,
    check_document,
    document_bytes,
    export_thread,
    import_thread,
    markdown,
)

__all__ = ["IMPORT_TOO_BIG", "TransferEndpoints", "server_refs"]

#: What the 413 of ``POST threads/import/`` asks the caller to send instead.
IMPORT_TOO_BIG = "send a smaller thread, or raise the body cap."
_NOT_FOUND = "No such thread."
_FORMATS = ("json", "markdown")


async def server_refs(
    document: dict[str, Any], store: AttachmentStore | None, *, request: HttpRequest
) -> None:
    """Replace every attachment reference of a checked document with the caller's own ref
    (``ImportProblem`` for one that names no upload of the caller, or any without a store)."""
    holders = attachment_holders(document)
    ids: list[str] = []
    for where, holder in holders:
        refs = holder["attachments"]
        if not isinstance(refs, list):
            raise ImportProblem(f"{where} must be a list of attachment references.")
        for position, ref in enumerate(refs):
            value = ref.get("id") if isinstance(ref, dict) else ref
            if not isinstance(value, str) or not value:
                raise ImportProblem(f"{where}.{position} has no string id.")
            ids.append(value)
    if not ids:
        return
    if store is None or not is_persistent(store):
        raise ImportProblem(
            f"{holders[0][0]} quotes attachments, but this endpoint keeps no uploads; remove "
            "the references, or mount an attachment store."
        )
    known = await attachment_refs(store, ids, request=request)
    for where, holder in holders:
        replaced = []
        for position, ref in enumerate(holder["attachments"]):
            value = ref.get("id") if isinstance(ref, dict) else ref
            if value not in known:
                raise ImportProblem(
                    f"{where}.{position} names attachment {str(value)[:40]!r}, which is not an "
                    "upload of yours; upload the file to attachments/ and quote the id it "
                    "returns, or remove the reference."
                )
            replaced.append(ref_json(known[value]))
        holder["attachments"] = replaced


class TransferEndpoints:
    """The export and import routes over one conversation store (and the attachment store
    the import re-resolves references against)."""

    def __init__(
        self,
        store: ConversationStore,
        *,
        attachment_store: AttachmentStore | None,
        body_limit: Callable[[], int],
    ) -> None:
        self._store = store
        self._uploads = attachment_store
        self._body_limit = body_limit

    def routes(self) -> list[Route]:
        """``threads/import/`` (before ``threads/<id>/``) and ``threads/<id>/export/``."""
        mounted = is_persistent(self._store)
        return [
            Route(
                path="threads/import/",
                name="threads-import",
                handlers={"POST": self.import_},
                too_big=IMPORT_TOO_BIG,
                mounted=mounted,
            ),
            Route(
                path="threads/<str:thread_id>/export/",
                name="thread-export",
                handlers={"GET": self.export},
                not_found=_NOT_FOUND,
                mounted=mounted,
            ),
        ]

    async def export(self, request: HttpRequest, thread_id: str) -> HttpResponseBase:
        """``GET threads/<id>/export/?format=json|markdown`` (default ``json``): 200 as a
        download, 400 for another format, 404 for a missing (or a stranger's) thread."""
        kind = request.GET.get("format", "json")
        if kind not in _FORMATS:
            raise Refusal.invalid(request, 'format must be "json" or "markdown".')
        if await owns_nothing(request, self._store):
            raise Refusal(404, _NOT_FOUND)
        document = await export_thread(self._store, thread_id, request=request)
        if document is None:
            raise Refusal(404, _NOT_FOUND)
        ratings = await thread_feedback(self._store, thread_id, request=request)
        if ratings:
            document["feedback"] = {key: value.as_json() for key, value in ratings.items()}
        if kind == "json":
            response = HttpResponse(document_bytes(document), content_type="application/json")
            extension = "json"
        else:
            text = markdown(document)
            response = HttpResponse(text.encode(), content_type="text/markdown; charset=utf-8")
            extension = "md"
        response["Content-Disposition"] = f'attachment; filename="thread.{extension}"'
        return response

    async def import_(self, request: HttpRequest) -> HttpResponseBase:
        """``POST threads/import/``: 201 ``{"threadId"}`` of the new thread; 400 naming the
        first problem of the document (nothing written), 413/415 for the body, the store's
        refusal (413 over the thread quota)."""
        payload = read_json_object(
            request,
            limit=self._body_limit(),
            too_big=IMPORT_TOO_BIG,
            not_json="The body is not JSON; send what export/ returned.",
            not_object=NOT_A_DOCUMENT,
        )
        new_id = new_thread_id()
        try:
            document = check_document(payload)
            await server_refs(document, self._uploads, request=request)
            await ensure_anonymous_session(request, self._store)
            await import_thread(self._store, document, new_id, request=request)
            await _import_feedback(self._store, document, new_id, request=request)
        except ImportProblem as exc:
            raise Refusal.invalid(request, str(exc)) from None
        except (ValueError, TypeError) as exc:  # a record the store cannot render
            raise Refusal.invalid(
                request, f"A message of the document cannot be stored ({type(exc).__name__})."
            ) from None
        return JsonResponse({"threadId": new_id}, status=201)


async def _import_feedback(
    store: ConversationStore, document: dict[str, Any], thread_id: str, *, request: HttpRequest
) -> None:
    """Keep a checked document's ``feedback`` on the imported thread, when the store keeps
    feedback (a store that does not drops it, as the page shows no thumbs there)."""
    feedback = document.get("feedback") or {}
    if not feedback or not implements(store, RatesMessages):
        return
    for message_id, value in feedback.items():
        await store.rate(thread_id, message_id, read_feedback(value), request=request)
