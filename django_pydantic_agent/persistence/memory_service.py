"""Conversations and attachments on the DataRobot Agentic Memory Service.

``MemoryServiceConversationStore`` keeps each thread as one chat-history chat (a session, one
event per logical message, written by ``chat_history.memory_service``), so the thread drawer
and the run path read and write the same data. ``MemoryServiceAttachmentStore`` keeps each
file as a session of base64 chunk events.

Both take a ``DRMemoryServiceClient`` (one identity-free pool per process: the store's owner
is not the client's principal) and a ``DRMemorySpace`` or the deduplication key of one, which
is created (idempotently) on first use and then reused. The owner is
``resolve_owner_id(request)`` under ``allow_anonymous``; its chat-history user is
``owner_user_uuid(owner_id)`` and its participant ``participant_id`` of that uuid, so one
owner's sessions are found by participant and never by another owner.

Request budget (measured against the emulator, ``docs/benchmarks.md``), for a thread of
fewer than 100 messages and a warm space:

- ``exists``: 1 (a session lookup by thread);
- ``load``: 2 (lookup, one page of events);
- ``rename`` / ``delete``: 2 (lookup, then PATCH / DELETE);
- ``list``: 1 + N (the owner's chats, then the newest event of each of N chats);
- ``save``: 3 for a new thread or an append (lookup, create or one page of events, one batch
  POST per 200 messages), 5 for a rewrite (lookup, events, DELETE, create, batch POST);
- ``branch_points``: none right after ``load`` in the same request, else as ``load``;
  ``activate``: as ``load``, and one POST (a marker event) when the active branch changes;
- ``export``: as ``load``; ``import_document``: a create and one batch POST per 200 events;
- attachment ``save``: 1 + ceil(chunks / 10); ``open``: 1 + ceil(chunks / 100); ``delete``: 2.

Resolving a space given by key adds one request (two when it exists) once per store.
"""

from __future__ import annotations

import base64
import hashlib
import io
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final

from django_pydantic_agent.chat_history.keys import participant_id
from django_pydantic_agent.chat_history.memory_service import (
    ChatRepository,
    ChatSessionRegistry,
    MessageRepository,
    RetryPolicy,
)
from django_pydantic_agent.chat_history.records import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
)
from django_pydantic_agent.chat_history.tree import BranchPoint, Tree
from django_pydantic_agent.memory_service import (
    DREvent,
    DRMemoryNotFoundError,
    DRMemoryServiceClient,
    DRMemorySpace,
    DRRangeKey,
    DRSession,
)
from django_pydantic_agent.persistence.base import (
    AttachmentRef,
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    OpenedAttachment,
    check_limit,
)
from django_pydantic_agent.persistence.derive import derive_preview, derive_title
from django_pydantic_agent.persistence.errors import StoreLimitError
from django_pydantic_agent.persistence.model import _check_allow_anonymous
from django_pydantic_agent.persistence.owner import aresolve_owner_uuid
from django_pydantic_agent.persistence.transfer import (
    active_wire,
    entries_tree,
    export_document,
    records_of,
)
from django_pydantic_agent.persistence.wire import (
    record_fingerprint,
    records_to_wire,
    wire_to_records,
)

if TYPE_CHECKING:
    from django.core.checks import CheckMessage
    from django.core.files.uploadedfile import UploadedFile
    from django.http import HttpRequest

    from django_pydantic_agent.chat_history import ChatRepositoryLike, MessageRepositoryLike

__all__ = [
    "DEFAULT_MAX_ATTACHMENT_BYTES",
    "MemoryServiceAttachmentStore",
    "MemoryServiceConversationStore",
    "StoredAttachment",
    "StoredAttachmentChunk",
    "StoredChat",
    "StoredWireMessage",
]

DEFAULT_MAX_ATTACHMENT_BYTES: Final[int] = 10 * 1024 * 1024
"""The default ``max_bytes`` of ``MemoryServiceAttachmentStore``: 10 MiB."""

_SEEN_CHATS: Final[str] = "_dpa_memory_service_chats"
_CHUNK_BYTES: Final[int] = 72 * 1024  # base64: 98 304 characters, under the 100 000 cap
_CHUNKS_PER_POST: Final[int] = 10  # about 1 MB per request


class StoredWireMessage(Message):
    """A chat-history message that also remembers the wire messages it was saved from.

    ``wire`` and ``wire_fingerprint`` are set by ``MemoryServiceConversationStore.save``; while
    ``record_fingerprint`` of the message still matches, ``load`` returns ``wire`` verbatim.
    """

    wire: list[dict[str, Any]] | None = None
    wire_fingerprint: str | None = None


class StoredChat(Chat):
    """A chat-history chat that also keeps the thread's archived flag (session metadata;
    readers that do not declare it ignore it, and a chat without it is not archived)."""

    archived: bool = False


class _SpaceHolder:
    """A space given as an object, or by deduplication key and created once on first use."""

    def __init__(self, client: DRMemoryServiceClient, space: DRMemorySpace | str) -> None:
        if not isinstance(client, DRMemoryServiceClient):
            raise TypeError(
                f"client={client!r} is not a DRMemoryServiceClient: pass the process's "
                "client (one pool per process)."
            )
        if isinstance(space, DRMemorySpace):
            self._space: DRMemorySpace | None = space
            self._key = space.deduplication_key or space.id
        elif isinstance(space, str) and space:
            self._space, self._key = None, space
        else:
            raise ValueError(
                f"space={space!r} is not valid: pass a DRMemorySpace or the non-empty "
                "deduplication key of one (it is created on first use)."
            )
        self._client = client

    @property
    def key(self) -> str:
        """The deduplication key (or id) naming the space."""
        return self._key

    async def get(self) -> DRMemorySpace:
        if self._space is None:
            # Idempotent on the service: two first calls racing adopt the same space.
            space = await DRMemorySpace.post(self._client, deduplication_key=self._key)
            self._space = self._space or space
        return self._space


class _OwnerChats:
    """A chat repository that acts for one user only: others' chats are absent."""

    def __init__(self, inner: ChatRepository, registry: ChatSessionRegistry, user: uuid.UUID):
        self._inner = inner
        self._registry = registry
        self._user = user

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        if chat_data.user_uuid is not None and chat_data.user_uuid != self._user:
            raise ValueError(
                f"create_chat got user_uuid={chat_data.user_uuid} but these repositories act "
                f"for the request's owner, user {self._user}; build them from the request of "
                "the user the chat belongs to."
            )
        return await self._inner.create_chat(chat_data)

    async def get_chat_by_thread_id(self, user_uuid: uuid.UUID, thread_id: str) -> Chat | None:
        if user_uuid != self._user:
            return None
        return await self._inner.get_chat_by_thread_id(user_uuid, thread_id)

    async def get_all_chats(self, user_uuid: uuid.UUID | None) -> Sequence[Chat]:
        if user_uuid is not None and user_uuid != self._user:
            return []
        return await self._inner.get_all_chats(self._user)

    async def _owned(self, chat_uuid: uuid.UUID) -> bool:
        state = await self._registry.state(chat_uuid)
        return state is not None and state.chat.user_uuid == self._user

    async def update_chat_name(self, chat_uuid: uuid.UUID, name: str) -> Chat | None:
        if not await self._owned(chat_uuid):
            return None
        return await self._inner.update_chat_name(chat_uuid, name)

    async def patch_chat(self, chat_uuid: uuid.UUID, **fields: object) -> Chat | None:
        if not await self._owned(chat_uuid):
            return None
        return await self._inner.patch_chat(chat_uuid, **fields)

    async def delete_chat(self, chat_uuid: uuid.UUID) -> Chat | None:
        if not await self._owned(chat_uuid):
            return None
        return await self._inner.delete_chat(chat_uuid)


def _created(message: Message, **values: Any) -> MessageCreate:
    fields = message.model_dump(
        exclude={"message_uuid", "chat_uuid", "tool_calls", "reasonings", "v"}
        | {"emitter_type", "emitter_id"}
    )
    return MessageCreate(**{**fields, **values})


def _parse_time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class MemoryServiceConversationStore:
    """A ``ConversationStore`` whose threads are chat-history chats on the Memory Service.

    ``save`` / ``load`` keep wire messages verbatim (a message a run changed is returned in
    its converted form, ``persistence.wire``); ``repositories(request=...)`` returns the
    Memory Service repositories for the request's owner, so a run persists incrementally.
    One ``ChatSessionRegistry`` per store caches sessions and events across requests. See the
    module docstring for the request budget.

    ``allow_anonymous`` as for the model-backed stores (default ``False``: anonymous requests
    raise ``AnonymousOperationError``). Raises ``TypeError`` / ``ValueError`` at construction
    for a client that is not a ``DRMemoryServiceClient`` or an empty space key.
    """

    persistent: ClassVar[bool] = True

    def __init__(
        self,
        client: DRMemoryServiceClient,
        space: DRMemorySpace | str,
        *,
        allow_anonymous: bool = False,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._space = _SpaceHolder(client, space)
        self._allow_anonymous = _check_allow_anonymous(allow_anonymous)
        self._retry = retry
        self._registry: ChatSessionRegistry | None = None

    def __repr__(self) -> str:
        return f"MemoryServiceConversationStore(space={self._space.key!r})"

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Nothing to report (``ChecksItself``): the client is checked at construction."""
        return []

    @property
    def allow_anonymous(self) -> bool:
        """Whether anonymous visitors are served, each keyed to their own session."""
        return self._allow_anonymous

    async def memory_space(self) -> DRMemorySpace:
        """The store's space, created on first use when given by deduplication key."""
        return await self._space.get()

    async def _registry_for(self) -> ChatSessionRegistry:
        space = await self._space.get()
        if self._registry is None:
            self._registry = ChatSessionRegistry(space, retry=self._retry, chat_class=StoredChat)
        return self._registry

    def bind_repositories(
        self, user_uuid: uuid.UUID
    ) -> tuple[ChatRepositoryLike, MessageRepositoryLike]:
        """The repository pair of the chat-history user ``user_uuid`` (no request is made).

        Raises ``RuntimeError`` before the space is resolved (``await memory_space()``).
        ``repositories(request=...)`` is the owner-resolving form.
        """
        return self._pair(user_uuid)

    def _pair(self, user_uuid: uuid.UUID) -> tuple[ChatRepositoryLike, MessageRepository]:
        """``bind_repositories``, its message repository typed as what it is."""
        registry = self._registry
        if registry is None:
            space = self._space._space
            if space is None:
                raise RuntimeError(
                    "The store's memory space is not resolved yet: await "
                    "store.memory_space() (or call an async store method) first."
                )
            registry = self._registry = ChatSessionRegistry(
                space, retry=self._retry, chat_class=StoredChat
            )
        space = registry.space
        chats = ChatRepository(space, registry)
        messages = MessageRepository(space, registry, message_class=StoredWireMessage)
        return _OwnerChats(chats, registry, user_uuid), messages

    async def _bound(
        self, request: HttpRequest
    ) -> tuple[uuid.UUID, ChatRepositoryLike, MessageRepository]:
        user = await aresolve_owner_uuid(request, allow_anonymous=self._allow_anonymous)
        await self._registry_for()
        chats, messages = self._pair(user)
        return user, chats, messages

    async def repositories(
        self, *, request: HttpRequest
    ) -> tuple[ChatRepositoryLike, MessageRepositoryLike]:
        """The Memory Service repositories for ``request``'s owner (``owner_user_uuid``)."""
        _, chats, messages = await self._bound(request)
        return chats, messages

    @staticmethod
    def _wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
        originals = {
            m.message_uuid: (m.wire_fingerprint, m.wire)
            for m in messages
            if isinstance(m, StoredWireMessage) and m.wire is not None and m.wire_fingerprint
        }
        return records_to_wire(messages, originals=originals)

    async def load(self, thread_id: str, *, request: HttpRequest) -> Conversation | None:
        """The owner's thread (its active branch) as wire messages, or ``None`` (missing or
        another owner's)."""
        user, chats, messages = await self._bound(request)
        chat = await chats.get_chat_by_thread_id(user, thread_id)
        if chat is None:
            return None
        self._seen(request)[(user, thread_id)] = chat.chat_uuid
        stored = await messages.get_chat_messages(chat.chat_uuid)
        return Conversation(thread_id=thread_id, messages=self._wire(stored))

    def _seen(self, request: HttpRequest) -> dict[tuple[uuid.UUID, str], uuid.UUID]:
        """The chats this store found for ``request`` (so ``branch_points`` after ``load``
        looks nothing up again)."""
        seen: dict[int, dict[tuple[uuid.UUID, str], uuid.UUID]] = request.__dict__.setdefault(
            _SEEN_CHATS, {}
        )
        return seen.setdefault(id(self), {})

    async def _chat(
        self, thread_id: str, request: HttpRequest, *, seen: bool = False
    ) -> tuple[MessageRepository, uuid.UUID] | None:
        """The message repository and the owner's chat ``thread_id`` (``seen``: as ``load``
        found it for this request, when it did), or ``None``."""
        user, chats, messages = await self._bound(request)
        chat_uuid = self._seen(request).get((user, thread_id)) if seen else None
        if chat_uuid is None:
            chat = await chats.get_chat_by_thread_id(user, thread_id)
            if chat is None:
                return None
            chat_uuid = chat.chat_uuid
        return messages, chat_uuid

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The active messages that have siblings, by AG-UI id (``KeepsBranches``): ``{}`` for
        a thread that never branched; ``None`` when the owner has no such thread. Right after
        ``load`` in the same request, no request to the service."""
        found = await self._chat(thread_id, request, seen=True)
        if found is None:
            return None
        messages, chat_uuid = found
        return await messages.branch_points(chat_uuid)

    async def activate(self, thread_id: str, message_id: str, *, request: HttpRequest) -> bool:
        """Make the branch through the message ``message_id`` (any branch) the active one,
        continued down the newest branch below it (``KeepsBranches``): one marker event
        appended, none when it already is active. ``False`` when the owner's thread has no
        such message (or the owner no such thread)."""
        found = await self._chat(thread_id, request)
        if found is None:
            return False
        messages, chat_uuid = found
        return await messages.activate(chat_uuid, message_id)

    async def export(self, thread_id: str, *, request: HttpRequest) -> dict[str, Any] | None:
        """The owner's thread, every branch and record, as a ``persistence.transfer`` document
        (``ExportsThreads``; ``runs`` is empty: this store keeps no run records); ``None``
        when the owner has no such thread."""
        found = await self._chat(thread_id, request)
        if found is None:
            return None
        messages, chat_uuid = found
        registry = await self._registry_for()
        state = await registry.state(chat_uuid)
        found_tree = await messages.get_chat_tree(chat_uuid)
        if state is None:
            return None
        records = {record.message_uuid: record for record, _, _ in found_tree}
        tree = Tree.of((r.message_uuid, parent, "", active) for r, parent, active in found_tree)
        return export_document(
            tree,
            title=state.chat.name,
            record=records.__getitem__,
            wire=lambda key: self._wire([records[key]]),
        )

    async def import_document(
        self, document: dict[str, Any], thread_id: str, *, request: HttpRequest
    ) -> None:
        """Create the owner's thread ``thread_id`` from a checked document (``ExportsThreads``):
        every branch, each record under a new uuid and rendered from its record (the file's
        wire copies are not trusted), running messages stopped, the document's active branch
        active. One chat create and one batch POST per 200 events (branch markers included).
        ``ImportProblem`` for a record that is no message, nothing written."""
        user, chats, messages = await self._bound(request)
        records = records_of(document, uuid.UUID(int=0))
        tree = entries_tree(document)
        title = document.get("title") or derive_title(active_wire(document))
        chat = await chats.create_chat(ChatCreate(name=title, thread_id=thread_id, user_uuid=user))

        async def create(index: int) -> uuid.UUID:
            record = records[index]
            stored = await messages.create_message(_created(record, chat_uuid=chat.chat_uuid))
            await self._nested(messages, record, stored.message_uuid)
            return stored.message_uuid

        parents = [tree.parent[index] for index in range(len(records))]
        async with messages.transaction():
            await messages.create_tree(chat.chat_uuid, parents, tree.active[-1], create)

    @staticmethod
    async def _nested(messages: MessageRepositoryLike, record: Message, parent: uuid.UUID) -> None:
        """Create ``record``'s tool calls and reasoning steps under the message ``parent``."""
        for call in record.tool_calls:
            await messages.create_message_tool_call(
                MessageToolCallCreate(message_uuid=parent, **call.model_dump(exclude={"uuid"}))
            )
        for step in record.reasonings:
            await messages.create_message_reasoning(
                MessageReasoningCreate(message_uuid=parent, **step.model_dump(exclude={"uuid"}))
            )

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        """Replace the owner's thread: appended messages are posted, anything else rewritten.

        ``conversation.owner_id`` is ignored. A thread whose stored messages are a prefix of
        ``conversation.messages`` gets only the rest (one batch POST); otherwise the chat is
        deleted and written again under the same title.
        """
        user, chats, messages = await self._bound(request)
        thread_id = conversation.thread_id
        chat = await chats.get_chat_by_thread_id(user, thread_id)
        read = wire_to_records(
            list(conversation.messages),
            chat_uuid=uuid.UUID(int=0),
            participant=participant_id(user),
            salt=thread_id,
        )
        records = read.messages
        name = derive_title(conversation.messages)
        if chat is not None:
            stored = await messages.get_chat_messages(chat.chat_uuid)
            prints = [record_fingerprint(m) for m in stored]
            if prints == [record_fingerprint(m) for m in records[: len(prints)]]:
                records = records[len(prints) :]
            else:
                name = chat.name
                await chats.delete_chat(chat.chat_uuid)
                chat = None
        if chat is None:
            chat = await chats.create_chat(
                ChatCreate(name=name, thread_id=thread_id, user_uuid=user)
            )
        if not records:
            return
        async with messages.transaction():
            for record in records:
                fingerprint, wire = read.originals[record.message_uuid]
                data = _created(
                    record, chat_uuid=chat.chat_uuid, wire=wire, wire_fingerprint=fingerprint
                )
                created = await messages.create_message(data)
                await self._nested(messages, record, created.message_uuid)

    async def delete(self, thread_id: str, *, request: HttpRequest) -> None:
        """Delete the owner's thread (its session and events); no-op when absent."""
        user, chats, _ = await self._bound(request)
        chat = await chats.get_chat_by_thread_id(user, thread_id)
        if chat is not None:
            await chats.delete_chat(chat.chat_uuid)

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> ConversationMetaList:
        """The owner's threads, most recently written first: title, preview, last event time."""
        check_limit(limit)
        user, chats, messages = await self._bound(request)
        found = list(await chats.get_all_chats(user))
        last = await messages.get_last_messages([chat.chat_uuid for chat in found])
        rows: ConversationMetaList = []
        for chat in found:
            newest = last.get(chat.chat_uuid)
            stamp = newest.created_at if newest is not None else chat.created_at
            preview = derive_preview(self._wire([newest])) if newest is not None else ""
            rows.append(
                ConversationMeta(
                    thread_id=chat.thread_id,
                    title=chat.name,
                    updated_at=_parse_time(stamp),
                    preview=preview,
                    archived=isinstance(chat, StoredChat) and chat.archived,
                )
            )
        oldest = datetime.min.replace(tzinfo=UTC)
        rows.sort(key=lambda row: row.updated_at or oldest, reverse=True)
        return rows if limit is None else rows[:limit]

    async def exists(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Whether the owner has ``thread_id`` (one session lookup, no events read)."""
        user, chats, _ = await self._bound(request)
        return await chats.get_chat_by_thread_id(user, thread_id) is not None

    async def rename(self, thread_id: str, title: str, *, request: HttpRequest) -> None:
        """Set the thread's title (the chat name); no-op when absent."""
        user, chats, _ = await self._bound(request)
        chat = await chats.get_chat_by_thread_id(user, thread_id)
        if chat is not None:
            await chats.update_chat_name(chat.chat_uuid, title)

    async def archive(self, thread_id: str, archived: bool, *, request: HttpRequest) -> bool:
        """Set the thread's archived flag (``ArchivesThreads``: ``StoredChat.archived``, one
        guarded PATCH of the session); ``False`` when absent. Search (titles only), filters
        and pages go through ``persistence.listing``'s generic path over ``list()``."""
        user, chats, _ = await self._bound(request)
        chat = await chats.get_chat_by_thread_id(user, thread_id)
        if chat is None:
            return False
        registry = await self._registry_for()
        owner_chats = _OwnerChats(ChatRepository(registry.space, registry), registry, user)
        return await owner_chats.patch_chat(chat.chat_uuid, archived=archived) is not None


# -- attachments ---------------------------------------------------------------------------


class StoredAttachment(DRSession):
    """One attachment: a session ``//attachment/<id>/`` owned by the uploader's participant."""

    __description_prefix__ = "attachment"

    attachment_id: Annotated[str, DRRangeKey]
    name: str = ""
    mime: str = ""
    size: int = 0
    sha256: str = ""
    chunks: int = 0
    user_uuid: uuid.UUID | None = None


class StoredAttachmentChunk(DREvent, session=StoredAttachment):
    """One chunk of an attachment's bytes: ``content`` is base64, ``index`` its position."""

    index: int = 0


class MemoryServiceAttachmentStore:
    """An ``AttachmentStore`` keeping each file as a Memory Service session of chunk events.

    Bytes are split into chunks of 72 KiB, each one event whose ``content`` is its base64
    (under the service's 100 000-character cap); the session's metadata holds the name, mime
    type, size, SHA-256 and chunk count. ``open`` checks the count, size and hash, so a
    partial or damaged upload opens as missing (``None``). Files over ``max_bytes`` (default
    10 MiB) are refused with ``StoreLimitError`` before anything is sent. Owner scoping,
    ``allow_anonymous`` and ``retry`` (transient failures, a ``RetryPolicy``) as for
    ``MemoryServiceConversationStore``; a retried create adopts the session it may have made.

    Raises ``ValueError`` at construction for a ``max_bytes`` that is not a positive integer.
    """

    persistent: ClassVar[bool] = True

    def __init__(
        self,
        client: DRMemoryServiceClient,
        space: DRMemorySpace | str,
        *,
        allow_anonymous: bool = False,
        max_bytes: int = DEFAULT_MAX_ATTACHMENT_BYTES,
        retry: RetryPolicy | None = None,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(
                f"max_bytes={max_bytes!r} is not valid: pass a positive number of bytes "
                f"(default {DEFAULT_MAX_ATTACHMENT_BYTES})."
            )
        self._space = _SpaceHolder(client, space)
        self._allow_anonymous = _check_allow_anonymous(allow_anonymous)
        self._max_bytes = max_bytes
        self._retry = retry if retry is not None else RetryPolicy()

    def __repr__(self) -> str:
        return (
            f"MemoryServiceAttachmentStore(space={self._space.key!r}, max_bytes={self._max_bytes})"
        )

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Nothing to report (``ChecksItself``): the client is checked at construction."""
        return []

    @property
    def allow_anonymous(self) -> bool:
        """Whether anonymous visitors are served, each keyed to their own session."""
        return self._allow_anonymous

    @property
    def max_bytes(self) -> int:
        """The largest file this store accepts."""
        return self._max_bytes

    async def _owner(self, request: HttpRequest) -> uuid.UUID:
        return await aresolve_owner_uuid(request, allow_anonymous=self._allow_anonymous)

    async def _find(self, attachment_id: str, user: uuid.UUID) -> StoredAttachment | None:
        if not attachment_id or "/" in attachment_id:
            return None
        space = await self._space.get()
        found = await self._retry.run(
            lambda: StoredAttachment.list(
                space, attachment_id=attachment_id, participant=participant_id(user)
            )
        )
        for session in found:
            if session.attachment_id == attachment_id and session.user_uuid == user:
                return session
        return None

    def _refuse(self, name: str | None, size: int) -> None:
        raise StoreLimitError(
            f"The upload {name!r} has {size} bytes, over this store's limit "
            f"(max_bytes={self._max_bytes}). Send a smaller file, or raise max_bytes."
        )

    async def save(self, upload: UploadedFile[bytes], *, request: HttpRequest) -> AttachmentRef:
        """Store the upload's bytes for the request's owner and return its ref.

        Raises ``StoreLimitError`` (naming ``max_bytes``) for a file over the limit.
        """
        user = await self._owner(request)
        if upload.size is not None and upload.size > self._max_bytes:
            self._refuse(upload.name, upload.size)
        data = upload.read(self._max_bytes + 1)
        if len(data) > self._max_bytes:
            self._refuse(upload.name, len(data))
        chunks = [data[i : i + _CHUNK_BYTES] for i in range(0, len(data), _CHUNK_BYTES)]
        space = await self._space.get()
        ref = AttachmentRef(
            id=uuid.uuid4().hex,
            name=upload.name or "attachment",
            mime=upload.content_type or "application/octet-stream",
            size=len(data),
        )
        session = await self._retry.run(
            lambda: StoredAttachment.post(
                space,
                participants=[participant_id(user)],
                attachment_id=ref.id,
                name=ref.name,
                mime=ref.mime,
                size=ref.size,
                sha256=hashlib.sha256(data).hexdigest(),
                chunks=len(chunks),
                user_uuid=user,
            ),
            # A create whose answer was lost may have happened: adopt it, never make a second.
            recheck=lambda: self._find(ref.id, user),
        )
        for start in range(0, len(chunks), _CHUNKS_PER_POST):
            batch = [
                {
                    "content": base64.b64encode(chunk).decode("ascii"),
                    "emitter_type": "agent",
                    "index": start + offset,
                }
                for offset, chunk in enumerate(chunks[start : start + _CHUNKS_PER_POST])
            ]
            # A repeated batch only repeats chunks by index, which ``open`` reads once.
            await self._retry.run(
                lambda batch=batch: StoredAttachmentChunk.post_batch(session, batch)  # type: ignore[misc]
            )
        return ref

    async def open(self, attachment_id: str, *, request: HttpRequest) -> OpenedAttachment | None:
        """Open the owner's attachment (bytes in memory), or ``None`` if missing or damaged."""
        user = await self._owner(request)
        session = await self._find(attachment_id, user)
        if session is None:
            return None
        parts: dict[int, bytes] = {}
        offset = 0
        while len(parts) < session.chunks:
            page = await self._retry.run(
                lambda offset=offset: StoredAttachmentChunk.list(  # type: ignore[misc]
                    session, offset=offset, limit=100
                )
            )
            if not page:
                break
            for event in page:
                parts[event.index] = base64.b64decode(event.content)
            offset += len(page)
        data = b"".join(parts[i] for i in sorted(parts))
        if (
            sorted(parts) != list(range(session.chunks))
            or len(data) != session.size
            or hashlib.sha256(data).hexdigest() != session.sha256
        ):
            return None
        ref = AttachmentRef(
            id=attachment_id, name=session.name, mime=session.mime, size=session.size
        )
        return OpenedAttachment(ref=ref, content=io.BytesIO(data))

    async def delete(self, attachment_id: str, *, request: HttpRequest) -> None:
        """Delete the owner's attachment; no-op when absent or another owner's."""
        user = await self._owner(request)
        session = await self._find(attachment_id, user)
        if session is not None:
            try:
                await self._retry.run(session.delete)
            except DRMemoryNotFoundError:  # gone meanwhile, or a retry after a lost answer
                return
