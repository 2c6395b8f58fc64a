"""One ``AGUIServer`` per configuration under test, each under its own prefix."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.urls import path

from django_pydantic_agent.agui import (
    AccessPolicy,
    AGUIServer,
    AttachmentOptions,
    MountOptions,
    RunOptions,
)
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.persistence import (
    DjangoSessionConversationStore,
    ScopedConversationStore,
)
from tests.agui.agents import (
    approval_agent,
    burst_agent,
    departing_agent,
    failing_agent,
    gated_agent,
    hanging_agent,
    history_agent,
    interrupted_agent,
    prompt_parts_agent,
    reader_agent,
    scripted_agent,
    slow_agent,
    text_agent,
)
from tests.testapp.stores import ThreadStore

UPLOAD_CAP = 1024


def bearer_user(request: HttpRequest) -> Any:
    """A toy header authentication: ``Authorization: Bearer <username>``."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return get_user_model().objects.filter(username=header.removeprefix("Bearer ")).first()


async def async_staff_only(request: HttpRequest) -> bool:
    return bool(request.user.is_staff)


async def always_wait(request: HttpRequest) -> float:
    return 7.2


class BrokenQueryStore(DefaultConversationStore):
    """Lists threads with a query that names a missing table: a real, non-transient DB error."""

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> Any:
        from asgiref.sync import sync_to_async
        from django.db import connection

        def query() -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT secret_column FROM no_such_table_s3cr3t")

        await sync_to_async(query)()
        raise AssertionError("the query above always fails")  # pragma: no cover

    async def find_threads(self, query: Any, *, request: HttpRequest) -> Any:
        """``GET threads/`` asks this: the same failing query."""
        return await self.list(request=request)


class LaggingRunStore:
    """A ``RunStore`` whose ``finish`` waits, once ``hold()`` is called, until a second run finds
    the thread busy: the gap between a run's ``RUN_FINISHED`` and the end of its record (the
    last events still being stored) held open, then closed by the next turn's arrival."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._busy_seen: asyncio.Event | None = None
        self._linger = 0.0

    def hold(self, *, linger: float = 0.0) -> None:
        """Hold ``finish`` until a run finds the thread busy, then ``linger`` seconds more."""
        self._busy_seen = asyncio.Event()
        self._linger = linger

    def release(self) -> None:
        self._busy_seen = None

    async def start(self, **kwargs: Any) -> Any:
        record, started = await self._inner.start(**kwargs)
        if not started and self._busy_seen is not None:
            self._busy_seen.set()
        return record, started

    async def finish(self, **kwargs: Any) -> Any:
        if self._busy_seen is not None:
            await asyncio.wait_for(self._busy_seen.wait(), timeout=10)
            await asyncio.sleep(self._linger)
        return await self._inner.finish(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class StaleStartRunStore:
    """A ``RunStore`` whose next ``start``, once ``stale()`` is called, reports the thread busy
    with the previous run as it was read just before that run's record was finished: the
    claim raced the end of the previous run."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._stale = False

    def stale(self) -> None:
        self._stale = True

    async def start(self, **kwargs: Any) -> Any:
        if self._stale:
            self._stale = False
            previous = await self._inner.get(
                owner_id=kwargs["owner_id"], thread_id=kwargs["thread_id"], run_id="run-1"
            )
            from dataclasses import replace

            return replace(previous, status="running"), False
        return await self._inner.start(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def stored(agent: Any = None, **kwargs: Any) -> AGUIServer:
    options: dict[str, Any] = {
        "conversation_store": DefaultConversationStore(),
        "attachment_store": DefaultAttachmentStore(),
        "attachments": AttachmentOptions(
            max_bytes=UPLOAD_CAP, allowed_types=("text/plain", "image/*")
        ),
        "access": AccessPolicy(csrf_exempt=True),
    }
    options.update(kwargs)
    return AGUIServer(agent or scripted_agent(), **options)


open_server = AGUIServer(
    text_agent(), access=AccessPolicy(require_authenticated=False, csrf_exempt=True)
)
scripted = AGUIServer(
    scripted_agent(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="scripted"),
)
csrf = AGUIServer(
    text_agent(), access=AccessPolicy(csrf_exempt=False), mount=MountOptions(namespace="csrf")
)
staff = AGUIServer(
    text_agent(),
    access=AccessPolicy(authorize=lambda request: request.user.is_staff, csrf_exempt=True),
)
async_staff = AGUIServer(
    text_agent(), access=AccessPolicy(authorize=async_staff_only, csrf_exempt=True)
)
token = AGUIServer(scripted_agent(), access=AccessPolicy(get_user=bearer_user))
slow = AGUIServer(
    slow_agent(),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    runs=RunOptions(heartbeat_seconds=0.05),
)
quiet = AGUIServer(
    scripted_agent(),
    access=AccessPolicy(csrf_exempt=True),
    runs=RunOptions(forward_reasoning=False),
)
failing = AGUIServer(failing_agent(), access=AccessPolicy(csrf_exempt=True))
failing_exposed = AGUIServer(
    failing_agent(),
    access=AccessPolicy(csrf_exempt=True),
    runs=RunOptions(expose_error_messages=True),
)
throttled = AGUIServer(
    text_agent(), access=AccessPolicy(csrf_exempt=True, throttle=lambda request: 7.2)
)
async_throttled = AGUIServer(
    text_agent(), access=AccessPolicy(csrf_exempt=True, throttle=always_wait)
)
hanging = AGUIServer(
    hanging_agent(), access=AccessPolicy(require_authenticated=False, csrf_exempt=True)
)
persisting = stored()
persisting_csrf = stored(access=AccessPolicy(csrf_exempt=False))
anonymous = stored(
    conversation_store=DefaultConversationStore(allow_anonymous=True),
    attachment_store=DefaultAttachmentStore(allow_anonymous=True),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    # Each event written on its own: the disconnect tests stop reading mid-run.
    runs=RunOptions(stream_coalesce_seconds=0),
)
refusing = stored(access=AccessPolicy(csrf_exempt=True, require_authenticated=False))
capped = stored(mount=MountOptions(thread_list_limit=1, namespace="capped"))
upload_throttled = stored(access=AccessPolicy(csrf_exempt=True, throttle=lambda request: 30))
any_type = stored(
    attachments=AttachmentOptions(max_bytes=UPLOAD_CAP, allowed_types=()),
    mount=MountOptions(namespace="any-type"),
)
in_session = AGUIServer(
    scripted_agent(),
    conversation_store=DjangoSessionConversationStore(),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    # Each event written on its own: the disconnect tests stop reading mid-run.
    runs=RunOptions(stream_coalesce_seconds=0),
)
# Shares the session namespace with ``in_session`` but allows only a few hundred bytes.
tight_session = AGUIServer(
    scripted_agent(),
    conversation_store=DjangoSessionConversationStore(max_bytes=300),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
)
quiet_stored = stored(runs=RunOptions(forward_reasoning=False))
no_heartbeat = AGUIServer(
    slow_agent(),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    runs=RunOptions(heartbeat_seconds=0),
)
failing_persisting = AGUIServer(
    failing_agent(),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
)
hanging_persisting = AGUIServer(
    hanging_agent(),
    conversation_store=DefaultConversationStore(allow_anonymous=True),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    runs=RunOptions(on_disconnect="cancel"),
)

# A client that leaves mid-run, on each kind of mount (tests/agui/test_disconnect.py): the run
# ends with the request (a Null store), is cancelled (on_disconnect="cancel"), or goes on.
departing_stateless = AGUIServer(
    departing_agent("hang"),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    mount=MountOptions(namespace="departing-stateless"),
)
departing_cancel = AGUIServer(
    departing_agent("hang"),
    conversation_store=DefaultConversationStore(allow_anonymous=True),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    runs=RunOptions(on_disconnect="cancel"),
    mount=MountOptions(namespace="departing-cancel"),
)
departing_durable = AGUIServer(
    departing_agent("finish"),
    conversation_store=DefaultConversationStore(allow_anonymous=True),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    mount=MountOptions(namespace="departing-durable"),
)

# One thread per session: the second thread's save is refused with StoreLimitError.
one_thread = AGUIServer(
    scripted_agent(),
    conversation_store=DjangoSessionConversationStore(max_threads=1),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
)
# Durable runs: a run that waits until cancelled, the interrupt policy, and Scoped stores.
hanging_durable = stored(hanging_agent(), mount=MountOptions(namespace="hanging-durable"))
hanging_interrupt = stored(
    hanging_agent(),
    mount=MountOptions(namespace="hanging-interrupt"),
    runs=RunOptions(concurrent_runs="interrupt"),
)
gated = stored(gated_agent(), mount=MountOptions(namespace="gated"))
# Second servers on the same database and cache: like a second worker, each holds none of the
# runs its twin started (tests/agui/test_relay.py).
gated_2 = stored(gated_agent(), mount=MountOptions(namespace="gated-2"))
hanging_durable_2 = stored(hanging_agent(), mount=MountOptions(namespace="hanging-durable-2"))
LAGGING_RUNS = LaggingRunStore(DefaultConversationStore().run_store())
lagging = stored(mount=MountOptions(namespace="lagging"), run_store=LAGGING_RUNS)
# A second worker.
lagging_2 = stored(mount=MountOptions(namespace="lagging-2"), run_store=LAGGING_RUNS)
STALE_RUNS = StaleStartRunStore(DefaultConversationStore().run_store())
stale_start = stored(mount=MountOptions(namespace="stale-start"), run_store=STALE_RUNS)
scoped_anonymous = AGUIServer(
    scripted_agent(),
    conversation_store=ScopedConversationStore(
        DefaultConversationStore(allow_anonymous=True), scope="s1"
    ),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    # Each event written on its own: the disconnect tests stop reading mid-run.
    runs=RunOptions(stream_coalesce_seconds=0),
    mount=MountOptions(namespace="scoped"),
)
scoped_session = AGUIServer(
    scripted_agent(),
    conversation_store=ScopedConversationStore(DjangoSessionConversationStore(), scope="s2"),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    # Each event written on its own: the disconnect tests stop reading mid-run.
    runs=RunOptions(stream_coalesce_seconds=0),
    mount=MountOptions(namespace="scoped-session"),
)
urls_default = AGUIServer(
    prompt_parts_agent(), access=AccessPolicy(require_authenticated=False, csrf_exempt=True)
)
urls_allowed = AGUIServer(
    prompt_parts_agent(),
    access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
    runs=RunOptions(allowed_file_url_schemes=("https",)),
)


def interrupted(
    ending: Literal["hang", "fail"],
    during: Literal["answer", "tool_args", "tool"] = "answer",
    **kwargs: Any,
) -> AGUIServer:
    """A run that never finishes, saved for anonymous visitors (keyed to their session).

    A disconnect cancels it (``on_disconnect="cancel"``): it would otherwise hang on.
    """
    options: dict[str, Any] = {
        "conversation_store": DefaultConversationStore(allow_anonymous=True),
        "access": AccessPolicy(require_authenticated=False, csrf_exempt=True),
        "runs": RunOptions(on_disconnect="cancel"),
    }
    options.update(kwargs)
    return AGUIServer(interrupted_agent(ending=ending, during=during), **options)


def burst(namespace: str, *, coalesce: float) -> AGUIServer:
    """``burst_agent``, stateless and open to anyone, coalescing writes for ``coalesce`` s."""
    return AGUIServer(
        burst_agent(),
        access=AccessPolicy(require_authenticated=False, csrf_exempt=True),
        runs=RunOptions(stream_coalesce_seconds=coalesce),
        mount=MountOptions(namespace=namespace),
    )


urlpatterns = [
    path("open/", open_server.urls),
    path("burst/", burst("burst", coalesce=60).urls),
    path("burst-plain/", burst("burst-plain", coalesce=0).urls),
    path(
        "burst-stored/",
        stored(
            burst_agent(),
            conversation_store=DefaultConversationStore(allow_anonymous=True),
            access=AccessPolicy(csrf_exempt=True, require_authenticated=False),
            runs=RunOptions(stream_coalesce_seconds=60),
            mount=MountOptions(namespace="burst-stored"),
        ).urls,
    ),
    path("agent/", scripted.urls),
    path("csrf/", csrf.urls),
    path("staff/", staff.urls),
    path("async-staff/", async_staff.urls),
    path("token/", token.urls),
    path("slow/", slow.urls),
    path("quiet/", quiet.urls),
    path("failing/", failing.urls),
    path("failing-exposed/", failing_exposed.urls),
    path("throttled/", throttled.urls),
    path("async-throttled/", async_throttled.urls),
    path("hanging/", hanging.urls),
    path("stored/", persisting.urls),
    path("stored-csrf/", persisting_csrf.urls),
    path("anon/", anonymous.urls),
    path("refusing/", refusing.urls),
    path("capped/", capped.urls),
    path("upload-throttled/", upload_throttled.urls),
    path("any-type/", any_type.urls),
    path("failing-stored/", failing_persisting.urls),
    path("session/", in_session.urls),
    path("tight-session/", tight_session.urls),
    path("no-heartbeat/", no_heartbeat.urls),
    path("quiet-stored/", quiet_stored.urls),
    path("hanging-stored/", hanging_persisting.urls),
    path("departing-stateless/", departing_stateless.urls),
    path("departing-cancel/", departing_cancel.urls),
    path("departing-durable/", departing_durable.urls),
    path("one-thread/", one_thread.urls),
    path("urls-default/", urls_default.urls),
    path("urls-allowed/", urls_allowed.urls),
    path("gated/", gated.urls),
    path("gated-2/", gated_2.urls),
    path("hanging-durable-2/", hanging_durable_2.urls),
    path("hanging-durable/", hanging_durable.urls),
    path("approval/", stored(approval_agent(), mount=MountOptions(namespace="approval")).urls),
    path("reader/", stored(reader_agent(), mount=MountOptions(namespace="reader")).urls),
    path("history/", stored(history_agent(), mount=MountOptions(namespace="history")).urls),
    path(
        "history-scoped/",
        stored(
            history_agent(),
            conversation_store=ScopedConversationStore(DefaultConversationStore(), scope="h"),
            mount=MountOptions(namespace="history-scoped"),
        ).urls,
    ),
    path(
        "history-session/",
        AGUIServer(
            history_agent(),
            conversation_store=DjangoSessionConversationStore(),
            access=AccessPolicy(csrf_exempt=True),
            mount=MountOptions(namespace="history-session"),
        ).urls,
    ),
    path(
        "gated-session/",
        AGUIServer(
            gated_agent(),
            conversation_store=DjangoSessionConversationStore(),
            access=AccessPolicy(csrf_exempt=True),
            mount=MountOptions(namespace="gated-session"),
        ).urls,
    ),
    path(
        "history-model/",
        AGUIServer(
            history_agent(),
            conversation_store=ThreadStore(),
            access=AccessPolicy(csrf_exempt=True),
            mount=MountOptions(namespace="history-model"),
        ).urls,
    ),
    path(
        "history-scoped-session/",
        AGUIServer(
            history_agent(),
            conversation_store=ScopedConversationStore(DjangoSessionConversationStore(), scope="h"),
            access=AccessPolicy(csrf_exempt=True),
            mount=MountOptions(namespace="history-scoped-session"),
        ).urls,
    ),
    path("hanging-interrupt/", hanging_interrupt.urls),
    path("lagging/", lagging.urls),
    path("lagging-2/", lagging_2.urls),
    path("stale-start/", stale_start.urls),
    path("scoped/", scoped_anonymous.urls),
    path("scoped-session/", scoped_session.urls),
    path(
        "broken-db/",
        AGUIServer(
            text_agent(),
            conversation_store=BrokenQueryStore(),
            access=AccessPolicy(csrf_exempt=True),
            mount=MountOptions(namespace="bdb"),
        ).urls,
    ),
    path(
        "small-body/", stored(mount=MountOptions(max_body_bytes=300, namespace="small-body")).urls
    ),
    path("interrupted/", interrupted("hang").urls),
    path(
        "interrupted-session/",
        interrupted("hang", conversation_store=DjangoSessionConversationStore()).urls,
    ),
    path(
        "interrupted-quiet/",
        interrupted("hang", runs=RunOptions(on_disconnect="cancel", forward_reasoning=False)).urls,
    ),
    path("interrupted-args/", interrupted("hang", "tool_args").urls),
    path("interrupted-tool/", interrupted("hang", "tool").urls),
    path("erroring/", interrupted("fail").urls),
    path("erroring-args/", interrupted("fail", "tool_args").urls),
    # A Null attachment store's upload view, mounted by hand: it must answer 410.
    path("uploads-off/", open_server.attachments_view),
]
