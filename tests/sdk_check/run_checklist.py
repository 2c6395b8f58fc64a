"""Run the wire contract's §15 acceptance checklist through the official, unmodified DataRobot SDK.

Run it with the interpreter of a venv that has ``tests/sdk_check/requirements.txt`` installed
(``datarobot[application-utils]==3.20.0``), never with ours: that SDK pins ``ag-ui-protocol<1``.

    .venv-sdk/bin/python tests/sdk_check/run_checklist.py \\
        --endpoint http://127.0.0.1:8000/api/v2 --token-a sdk-a --token-b sdk-b

Every call goes through ``datarobot.application_utils.persistence``: the ORM classes
(``DRMemorySpace``, ``DRSession``/``DREvent`` subclasses) and, for the few checklist items that
need a request the ORM never builds, the SDK's own transport ``DRMemoryServiceClient.request``,
which applies the same headers and the same status-to-exception mapping. The clients share one
``httpx.AsyncClient`` whose response hook records every exchange, so the checks can also assert
what went over the wire (bodies, ``If-Match``, query strings, raw status codes).

Prints one JSON line per check, ``{"check": name, "ok": bool, "detail": str}``, and exits 1 if
any check failed (2 on a usage error). ``--scenario faults`` expects the caller to have armed
the emulator's fault injector (see ``run_faults``); the default scenario needs a plain server.
The checks tolerate data left by earlier runs (dedup keys carry a per-run suffix), so the
script can also be pointed at a long-running emulator.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import hashlib
import http.cookiejar
import importlib.metadata
import json
import socket
import sys
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlsplit

import httpx
from datarobot.application_utils import chat_history as ch
from datarobot.application_utils import persistence as dr
from pydantic import BaseModel

SDK_VERSION = "3.20.0"  # the client the wire contract (memory-service-wire.md) describes
SYS = dr.SYSTEM_PARTICIPANT
USER = "aabbccddeeff001122334455"
STRANGER = "ffffffffffffffffffffffff"
DEFAULT_STRATEGIES = [{"type": "soft_delete", "trigger": {"ttl": 63072000}}]
SERVER_DEFAULT_STRATEGIES = [{"type": "soft_delete", "trigger": {"ttl": 15552000}}]
EVENT_PHRASE = "patch of incorrect version of event"
SESSION_PHRASE = "session version mismatch"


# --------------------------------------------------------------------------- ORM classes


class ChatSession(dr.DRSession):  # the quick start's class (§15 setup)
    __description_prefix__ = "chat"

    tenant: Annotated[str, dr.DRRangeKey]
    topic: Annotated[str, dr.DRRangeKey]
    chat_id: Annotated[str, dr.DRDeduplicationKey]
    rev: Annotated[int, dr.DRConcurrencyField]
    title: str = ""


class OtherSession(dr.DRSession):  # prefix "chatx": must never match a "//chat/" query
    __description_prefix__ = "chatx"

    q: Annotated[str, dr.DRRangeKey]


class Loc(dr.DRSession):  # no range keys, and no strategies: the server default applies
    __description_prefix__ = "loc"
    __lifecycle_strategies__: ClassVar[list[dict[str, Any]]] = []


class Monthly(dr.DRSession):  # a custom strategy list, echoed verbatim
    __description_prefix__ = "monthly"
    __lifecycle_strategies__: ClassVar[list[dict[str, Any]]] = [
        {"type": "soft_delete", "trigger": {"ttl": 2592000}}
    ]


class ChatMessage(dr.DREvent, session=ChatSession):
    __event_type__ = "message"

    score: float = 0.0


class StatusEvent(dr.DREvent, session=ChatSession):
    __event_type__ = "status"


class ToolOutput(dr.DREvent, session=ChatSession):
    __event_type__ = "tool_output"


class Item(BaseModel):
    name: str
    n: int


class RichMessage(dr.DREvent, session=ChatSession):
    __event_type__ = "message"

    tags: list[str] = []
    meta: dict[str, Any] = {}
    when: dt.datetime | None = None
    ref: uuid.UUID | None = None
    nested: list[Item] = []
    opt: str | None = "unset"
    count: int = 0
    ratio: float = 0.0


def _strategy_class(name: str, strategies: list[dict[str, Any]]) -> type[dr.DRSession]:
    return type(
        name,
        (dr.DRSession,),
        {"__description_prefix__": "bad", "__lifecycle_strategies__": strategies},
    )


BAD_STRATEGY_CLASSES = {
    "six-strategies": _strategy_class("SixStrategies", [DEFAULT_STRATEGIES[0]] * 6),
    "ttl-0": _strategy_class("TtlZero", [{"type": "soft_delete", "trigger": {"ttl": 0}}]),
    "ttl-too-long": _strategy_class(
        "TtlTooLong", [{"type": "soft_delete", "trigger": {"ttl": 63072001}}]
    ),
    "two-trigger-keys": _strategy_class(
        "TwoTriggers", [{"type": "soft_delete", "trigger": {"ttl": 10, "idle": 10}}]
    ),
    "bogus-type": _strategy_class("BogusType", [{"type": "bogus", "trigger": {"ttl": 10}}]),
    "never-gate-off": _strategy_class(
        "NeverTrigger", [{"type": "soft_delete", "trigger": {"never": True}}]
    ),
}


# --------------------------------------------------------------------------- recording


@dataclass
class Exchange:
    """One request and its response, as seen by the shared httpx client."""

    method: str
    url: httpx.URL
    request_headers: httpx.Headers
    request_body: bytes
    status: int
    response_headers: httpx.Headers
    response_body: bytes

    @property
    def path(self) -> str:
        return self.url.path

    @property
    def query(self) -> list[tuple[str, str]]:
        return parse_qsl(self.url.query.decode("ascii"), keep_blank_values=True)

    def request_json(self) -> Any:
        return json.loads(self.request_body) if self.request_body else None

    def response_json(self) -> Any:
        return json.loads(self.response_body) if self.response_body else None


@dataclass
class Recorder:
    exchanges: list[Exchange] = field(default_factory=list)

    async def on_response(self, response: httpx.Response) -> None:
        await response.aread()
        request = response.request
        self.exchanges.append(
            Exchange(
                method=request.method,
                url=request.url,
                request_headers=request.headers,
                request_body=request.content,
                status=response.status_code,
                response_headers=response.headers,
                response_body=response.content,
            )
        )

    def mark(self) -> int:
        return len(self.exchanges)

    def since(self, mark: int, method: str | None = None) -> list[Exchange]:
        return [x for x in self.exchanges[mark:] if method is None or x.method == method]

    def only(self, mark: int, method: str | None = None) -> Exchange:
        found = self.since(mark, method)
        expect(len(found) == 1, f"expected one {method or ''} request, saw {len(found)}")
        return found[0]


# --------------------------------------------------------------------------- check helpers


E = TypeVar("E", bound=dr.DRMemoryServiceError)


class CheckFailed(Exception):
    pass


def expect(condition: object, message: str) -> None:
    """An assertion that survives ``python -O``."""
    if not condition:
        raise CheckFailed(message)


def equal(observed: Any, expected: Any, what: str) -> None:
    expect(observed == expected, f"{what}: expected {expected!r}, observed {observed!r}")


def same_json(observed: Any, expected: Any, what: str) -> None:
    """Equal as JSON text, so 1 and 1.0 (and True and 1) differ."""
    a = json.dumps(observed, sort_keys=True)
    b = json.dumps(expected, sort_keys=True)
    expect(a == b, f"{what}: expected {b}, observed {a}")


async def raises(
    error: type[E],
    call: Any,
    *,
    status: int | str | None = "any",
    exact: bool = False,
) -> E:
    """Await ``call`` and demand that it raises ``error`` (exactly that class with ``exact``)."""
    try:
        await call
    except dr.DRMemoryServiceError as exc:
        if not isinstance(exc, error) or (exact and type(exc) is not error):
            raise CheckFailed(
                f"expected {error.__name__}, got {type(exc).__name__} "
                f"(status {exc.status_code}): {exc}"
            ) from exc
        if status != "any":
            equal(exc.status_code, status, f"{error.__name__}.status_code")
        return exc
    raise CheckFailed(f"expected {error.__name__}, but the call succeeded")


async def all_spaces(client: dr.DRMemoryServiceClient) -> list[dr.DRMemorySpace]:
    """Every space of the principal: ``DRMemorySpace.list`` returns one page, so page it here."""
    spaces: list[dr.DRMemorySpace] = []
    while True:
        page = await dr.DRMemorySpace.list(client, offset=len(spaces), limit=100)
        spaces.extend(page)
        if len(page) < 100:
            return spaces


def is_iso(value: str) -> bool:
    try:
        dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return False
    return True


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (TypeError, ValueError):
        return False
    return True


class Results:
    def __init__(self) -> None:
        self.failed = 0
        self.count = 0
        self.names: set[str] = set()

    def emit(self, name: str, ok: bool, detail: str) -> None:
        if name in self.names:
            raise RuntimeError(f"duplicate check name {name!r}")
        self.names.add(name)
        self.count += 1
        self.failed += not ok
        print(json.dumps({"check": name, "ok": ok, "detail": detail}), flush=True)

    @contextlib.contextmanager
    def check(self, name: str, detail: str = "") -> Iterator[None]:
        """Record the block as one check: it passes when it raises nothing."""
        try:
            yield
        except CheckFailed as exc:
            self.emit(name, False, str(exc))
        except Exception as exc:  # an unexpected error is a failed check, not a crash
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.emit(
                name,
                False,
                f"{type(exc).__name__}: {exc} (at {where.name}:{where.lineno})",
            )
        else:
            self.emit(name, True, detail)


# --------------------------------------------------------------------------- the run


class Run:
    def __init__(
        self, results: Results, endpoint: str, http: httpx.AsyncClient, rec: Recorder
    ) -> None:
        self.r = results
        self.endpoint = endpoint.rstrip("/")
        self.http = http
        self.rec = rec
        self.suffix = uuid.uuid4().hex[:8]

    def key(self, name: str) -> str:
        return f"{name}-{self.suffix}"

    def client(self, token: str) -> dr.DRMemoryServiceClient:
        return dr.DRMemoryServiceClient(
            endpoint=self.endpoint, api_token=token, http_client=self.http
        )


async def run_checklist(run: Run, token_a: str, token_b: str) -> None:
    a = run.client(token_a)
    b = run.client(token_b)
    sdk_checks(run.r)
    await transport_checks(run, a)
    await space_checks(run, a, b)
    await session_checks(run, a, b)
    await list_checks(run, a)
    await session_patch_checks(run, a)
    await event_checks(run, a)
    await event_patch_checks(run, a)
    await batch_and_delete_checks(run, a)
    await isolation_checks(run, a, b)
    await chat_history_checks(run, a)
    wire_invariants(run)


def sdk_checks(r: Results) -> None:
    with r.check("00-sdk-version", f"datarobot {SDK_VERSION}"):
        equal(importlib.metadata.version("datarobot"), SDK_VERSION, "installed datarobot")

    with r.check("00-sdk-unmodified", "application_utils files match the wheel's RECORD"):
        dist = importlib.metadata.distribution("datarobot")
        files = [f for f in dist.files or [] if str(f).startswith("datarobot/application_utils/")]
        checked = 0
        for entry in files:
            if entry.hash is None or entry.hash.mode != "sha256":
                continue
            digest = hashlib.sha256(entry.locate().read_bytes()).digest()
            actual = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
            equal(actual, entry.hash.value, f"sha256 of {entry}")
            checked += 1
        expect(checked >= 15, f"only {checked} SDK files had a recorded hash")


async def transport_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    r = run.r
    with r.check("01-base-url", "client.base_url is <endpoint>/memory"):
        equal(a.base_url, f"{run.endpoint}/memory", "base_url")

    with r.check("03-malformed-token-is-401", "DRMemoryServiceError with status_code 401"):
        bad = run.client("two words")
        await raises(dr.DRMemoryServiceError, dr.DRMemorySpace.list(bad), status=401, exact=True)

    # A bound socket that never listens refuses connections, and holds the port meanwhile.
    with (
        r.check("06-unreachable", "DRMemoryUnavailableError with status_code None"),
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hole,
    ):
        hole.bind(("127.0.0.1", 0))
        port = hole.getsockname()[1]
        async with dr.DRMemoryServiceClient(
            endpoint=f"http://127.0.0.1:{port}/api/v2", api_token="x", timeout=5
        ) as dead:
            await raises(dr.DRMemoryUnavailableError, dr.DRMemorySpace.list(dead), status=None)


async def space_checks(run: Run, a: dr.DRMemoryServiceClient, b: dr.DRMemoryServiceClient) -> None:
    r, rec = run.r, run.rec
    k1 = run.key("k1")

    with r.check("07-space-post-empty", "body {} -> 201 with ids, createdAt, null fields"):
        mark = rec.mark()
        empty = await dr.DRMemorySpace.post(a)
        sent = rec.only(mark, "POST")
        equal(sent.request_body, b"{}", "request body")
        equal(sent.status, 201, "status")
        expect(is_uuid(empty.id), f"space id {empty.id!r} is not a UUID")
        expect(empty.user_id and empty.tenant_id, "userId and tenantId must be non-empty")
        expect(is_iso(empty.created_at), f"createdAt {empty.created_at!r} is not ISO-8601")
        for name in (
            "description",
            "deduplication_key",
            "llm_model_name",
            "llm_base_url",
            "custom_instructions",
        ):
            equal(getattr(empty, name), None, name)

    fields = {
        "description": "d",
        "deduplication_key": k1,
        "llm_model_name": "m",
        "llm_base_url": "http://x",
        "custom_instructions": "ci",
    }
    with r.check("08-space-post-full", "all five values echoed"):
        full = await dr.DRMemorySpace.post(a, **fields)
        for name, value in fields.items():
            equal(getattr(full, name), value, name)

    with r.check("09-space-dedup-adopt", "409 MemorySpaceDeduplicationConflict, then adopted"):
        mark = rec.mark()
        adopted = await dr.DRMemorySpace.post(a, **{**fields, "description": "other"})
        conflict = rec.since(mark)[0]
        equal(conflict.status, 409, "raw status")
        body = conflict.response_json()
        equal(body.get("errorName"), "MemorySpaceDeduplicationConflict", "errorName")
        equal(body.get("existingMemorySpaceId"), full.id, "existingMemorySpaceId")
        equal(body.get("existingMemorySpaceUrl"), f"/memory/{full.id}/", "existingMemorySpaceUrl")
        equal(conflict.response_headers.get("Location"), f"/memory/{full.id}/", "Location (70)")
        equal((adopted.id, adopted.description), (full.id, "d"), "adopted id and description")

    with r.check("10-space-dedup-per-principal", "another principal's same key gets a new space"):
        mark = rec.mark()
        theirs = await dr.DRMemorySpace.post(b, deduplication_key=k1)
        equal(rec.only(mark).status, 201, "raw status")
        expect(theirs.id != full.id, "the other principal adopted our space")

    with r.check("11-space-get", "same fields; unknown and malformed ids are 404"):
        got = await dr.DRMemorySpace.get(a, full.id)
        for name, value in {**fields, "id": full.id, "created_at": full.created_at}.items():
            equal(getattr(got, name), value, name)
        await raises(
            dr.DRMemoryNotFoundError, dr.DRMemorySpace.get(a, str(uuid.uuid4())), status=404
        )
        await raises(dr.DRMemoryNotFoundError, dr.DRMemorySpace.get(a, "not-a-uuid"), status=404)

    with r.check("12-space-list", "own live spaces only; exact deduplicationKey filter"):
        mine = {s.id for s in await all_spaces(a)}
        expect({empty.id, full.id} <= mine, "own spaces missing from the list")
        expect(theirs.id not in mine, "another principal's space is listed")
        equal([s.id for s in await dr.DRMemorySpace.list(a, deduplication_key=k1)], [full.id], "k1")
        equal(await dr.DRMemorySpace.list(a, deduplication_key=run.key("nope")), [], "nope")

    with r.check("13-space-list-bounds", "limit 0, limit 101 and offset -1 are 422"):
        for bad in ({"limit": 0}, {"limit": 101}, {"offset": -1}):
            await raises(dr.DRMemoryValidationError, dr.DRMemorySpace.list(a, **bad), status=422)

    with r.check("14-space-list-pages", "offset/limit slice a stable order; total counts all"):
        await dr.DRMemorySpace.post(a)
        everything = [s.id for s in await all_spaces(a)]
        expect(len(everything) >= 3, f"expected at least 3 spaces, listed {len(everything)}")
        mark = rec.mark()
        equal(
            [s.id for s in await dr.DRMemorySpace.list(a, offset=1, limit=1)],
            everything[1:2],
            "page",
        )
        equal(rec.only(mark).response_json().get("total"), len(everything), "raw total")

    with r.check("15-space-patch", "body {'description':'new'}; 200 with the full object"):
        mark = rec.mark()
        await full.patch(description="new")
        sent = rec.only(mark)
        same_json(sent.request_json(), {"description": "new"}, "request body")
        equal(sent.status, 200, "status")
        expect("memorySpaceId" in sent.response_json(), "PATCH answer is not the full object")
        equal(full.description, "new", "local description")
        got = await dr.DRMemorySpace.get(a, full.id)
        equal(got.description, "new", "stored description")
        equal((got.llm_model_name, got.custom_instructions), ("m", "ci"), "untouched fields")

    with r.check("16-space-delete", "204; gone from get and list; key freed; nested routes 404"):
        mark = rec.mark()
        await full.delete()
        equal(rec.only(mark).status, 204, "DELETE status")
        await raises(dr.DRMemoryNotFoundError, dr.DRMemorySpace.get(a, full.id))
        expect(full.id not in {s.id for s in await all_spaces(a)}, "still listed")
        mark = rec.mark()
        fresh = await dr.DRMemorySpace.post(a, deduplication_key=k1)
        equal(rec.only(mark).status, 201, "re-create status")
        expect(fresh.id != full.id, "the deleted space came back")
        await raises(
            dr.DRMemoryNotFoundError,
            ChatSession.post(full, tenant="t", topic="x", chat_id="c"),
            status=404,
        )

    with r.check("17-space-validation", "1001-char description, 73-char and empty keys are 422"):
        for bad in (
            {"description": "x" * 1001},
            {"deduplication_key": "k" * 73},
            {"deduplication_key": ""},
        ):
            await raises(dr.DRMemoryValidationError, dr.DRMemorySpace.post(a, **bad), status=422)


async def session_checks(
    run: Run, a: dr.DRMemoryServiceClient, b: dr.DRMemoryServiceClient
) -> None:
    r, rec = run.r, run.rec
    space = await dr.DRMemorySpace.post(a)
    elsewhere = await dr.DRMemorySpace.post(a)

    with r.check("18-session-post", "exact body; 201 with version 1 and every field"):
        mark = rec.mark()
        s = await ChatSession.post(space, tenant="acme", topic="billing", chat_id="c1", title="T")
        sent = rec.only(mark)
        same_json(
            sent.request_json(),
            {
                "participants": [SYS],
                "deduplicationKey": "c1",
                "description": "//chat/acme/billing/",
                "metadata": {"title": "T"},
                "lifecycleStrategies": DEFAULT_STRATEGIES,
            },
            "request body",
        )
        equal(sent.status, 201, "status")
        expect(s.id and s.created_at, "id and createdAt must be non-empty")
        equal((s.version, s.rev, s.participants), (1, 1, [SYS]), "version, rev, participants")
        equal(s.lifecycle_strategies, DEFAULT_STRATEGIES, "lifecycle_strategies")
        equal((s.title, s.tenant, s.topic, s.chat_id), ("T", "acme", "billing", "c1"), "fields")

    with r.check("19-session-dedup-adopt", "409 SessionDeduplicationConflict, then adopted"):
        mark = rec.mark()
        again = await ChatSession.post(space, tenant="x", topic="y", chat_id="c1", title="other")
        conflict = rec.since(mark)[0]
        equal(conflict.status, 409, "raw status")
        body = conflict.response_json()
        url = f"/memory/{space.id}/sessions/{s.id}/"
        equal(body.get("errorName"), "SessionDeduplicationConflict", "errorName")
        equal(body.get("existingSessionId"), s.id, "existingSessionId")
        equal(body.get("existingSessionUrl"), url, "existingSessionUrl")
        equal(conflict.response_headers.get("Location"), url, "Location (70)")
        equal((again.id, again.title, again.topic), (s.id, "T", "billing"), "adopted session")

    with r.check("20-session-dedup-per-space", "the same key in another space is a new session"):
        mark = rec.mark()
        other = await ChatSession.post(elsewhere, tenant="acme", topic="billing", chat_id="c1")
        equal(rec.only(mark).status, 201, "status")
        expect(other.id != s.id, "the key collided across spaces")

    with r.check("21-session-get-by-id", "equal fields; unknown id and wrong space are 404"):
        got = await ChatSession.get(space, id=s.id)
        equal(
            (got.id, got.version, got.title, got.tenant, got.topic, got.chat_id, got.participants),
            (s.id, 1, "T", "acme", "billing", "c1", [SYS]),
            "fields",
        )
        equal(got.created_at, s.created_at, "created_at")
        await raises(dr.DRMemoryNotFoundError, ChatSession.get(space, id=str(uuid.uuid4())))
        await raises(dr.DRMemoryNotFoundError, ChatSession.get(elsewhere, id=s.id))

    with r.check("22-session-get-by-dedup-key", "?deduplicationKey=c1&offset=0&limit=100"):
        mark = rec.mark()
        got = await ChatSession.get(space, chat_id="c1")
        equal(got.id, s.id, "id")
        equal(
            rec.only(mark).query,
            [("deduplicationKey", "c1"), ("offset", "0"), ("limit", "100")],
            "query",
        )
        await raises(dr.DRMemoryNotFoundError, ChatSession.get(space, chat_id="missing"))

    with r.check("23-empty-strategies-get-default", "lifecycleStrategies [] -> 180-day default"):
        mark = rec.mark()
        loc = await Loc.post(space)
        equal(rec.only(mark).request_json()["lifecycleStrategies"], [], "sent strategies")
        equal(loc.lifecycle_strategies, SERVER_DEFAULT_STRATEGIES, "stored strategies")

    with r.check("24-custom-strategies-echoed", "a custom list is stored verbatim"):
        monthly = await Monthly.post(space)
        equal(monthly.lifecycle_strategies, Monthly.__lifecycle_strategies__, "strategies")
        equal(
            (await Monthly.get(space, id=monthly.id)).lifecycle_strategies,
            Monthly.__lifecycle_strategies__,
            "strategies on get",
        )

    for name, cls in BAD_STRATEGY_CLASSES.items():
        with r.check(f"25-invalid-strategies-{name}", "422 DRMemoryValidationError"):
            await raises(dr.DRMemoryValidationError, cls.post(space), status=422)

    for name, participants in {
        "none": [],
        "not-an-oid": ["xyz"],
        "two": [SYS, USER],
    }.items():
        with r.check(f"25-invalid-participants-{name}", "422 DRMemoryValidationError"):
            await raises(
                dr.DRMemoryValidationError,
                ChatSession.post(
                    space, tenant="t", topic="p", chat_id=run.key(name), participants=participants
                ),
                status=422,
            )

    with r.check("25-invalid-metadata", "metadata that is not an object is 422"):
        await raises(
            dr.DRMemoryValidationError,
            a.request(
                "POST",
                f"{space.id}/sessions/",
                json={
                    "participants": [SYS],
                    "description": "//chat/t/m/",
                    "metadata": "str",
                    "lifecycleStrategies": DEFAULT_STRATEGIES,
                },
            ),
            status=422,
        )

    with r.check("26-participants-echoed", "participants echo exactly"):
        owned = await ChatSession.post(
            space, tenant="t", topic="u", chat_id="u1", participants=[USER]
        )
        equal(owned.participants, [USER], "participants")
        equal((await ChatSession.get(space, id=owned.id)).participants, [USER], "on get")


async def list_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    r, rec = run.r, run.rec
    space = await dr.DRMemorySpace.post(a)
    billing = await ChatSession.post(space, tenant="acme", topic="billing", chat_id="l1")
    support = await ChatSession.post(
        space, tenant="acme", topic="support", chat_id="l2", participants=[USER]
    )
    corp = await ChatSession.post(space, tenant="acmecorp", topic="x", chat_id="l3")
    await OtherSession.post(space, q="q")
    await Loc.post(space)

    def ids(sessions: list[dr.DRSession]) -> set[str]:
        return {x.id for x in sessions}

    with r.check("27-list-by-prefix", "prefix scoping: chatx and loc never match //chat/"):
        equal(ids(await ChatSession.list(space)), {billing.id, support.id, corp.id}, "all chat")
        equal(ids(await ChatSession.list(space, tenant="acme")), {billing.id, support.id}, "acme")
        equal(
            ids(await ChatSession.list(space, tenant="acme", topic="billing")),
            {billing.id},
            "acme/billing",
        )
        equal(len(await OtherSession.list(space)), 1, "chatx sessions")
        equal(len(await Loc.list(space)), 1, "loc sessions")

    with r.check("28-list-case-insensitive", "tenant=ACME matches acme"):
        equal(ids(await ChatSession.list(space, tenant="ACME")), {billing.id, support.id}, "ACME")

    with r.check("29-list-escaping", "% and _ are literal; / and % round-trip"):
        mark = rec.mark()
        odd = await ChatSession.post(space, tenant="a/b%_c", topic="t", chat_id="l4")
        equal(rec.only(mark).response_json()["description"], "//chat/a%2Fb%25_c/t/", "stored")
        equal(odd.tenant, "a/b%_c", "decoded tenant")
        equal(ids(await ChatSession.list(space, tenant="a/b%_c")), {odd.id}, "escaped needle")
        axb = await ChatSession.post(space, tenant="aXb", topic="t", chat_id="l5")
        ax25 = await ChatSession.post(space, tenant="ax25", topic="t", chat_id="l6")
        underscore = await ChatSession.list(space, tenant="a_b")
        expect(axb.id not in ids(underscore), "'_' acted as a wildcard")
        percent = await ChatSession.list(space, tenant="a%")
        expect(ax25.id not in ids(percent), "'%' acted as a wildcard")

    with r.check("30-list-participant-filter", "participants filter, ANDed with the prefix"):
        equal(ids(await ChatSession.list(space, participant=USER)), {support.id}, "USER")
        equal(
            ids(await ChatSession.list(space, participant=USER, tenant="acme")),
            {support.id},
            "USER + acme",
        )
        equal(ids(await ChatSession.list(space, participant=USER, tenant="acmecorp")), set(), "AND")

    with r.check("31-list-bad-participant", "an invalid ObjectId filter is 400"):
        await raises(
            dr.DRMemoryBadRequestError,
            ChatSession.list(space, participant="not-an-oid"),
            status=400,
        )

    with r.check("32-list-short-description", "description shorter than 3 chars is 422"):
        await raises(
            dr.DRMemoryValidationError,
            a.request("GET", f"{space.id}/sessions/", params={"description": "ab"}),
            status=422,
        )

    with r.check("33-list-pagination", "250 sessions: pages 0/100/200 of 100/100/50, total 250"):
        big = await dr.DRMemorySpace.post(a)
        created = [
            (await ChatSession.post(big, tenant="p", topic=str(i), chat_id=f"p{i}")).id
            for i in range(250)
        ]
        mark = rec.mark()
        listed = [x.id for x in await ChatSession.list(big)]
        pages = rec.since(mark)
        equal(sorted(listed), sorted(created), "ids")
        equal(len(set(listed)), 250, "distinct ids")
        equal(listed, created, "order (ascending creation)")
        equal(
            [(dict(p.query)["offset"], dict(p.query)["limit"]) for p in pages],
            [("0", "100"), ("100", "100"), ("200", "100")],
            "pages requested",
        )
        equal([len(p.response_json()["items"]) for p in pages], [100, 100, 50], "page sizes")
        equal([p.response_json().get("total") for p in pages], [250, 250, 250], "totals")

    with r.check("34-list-excludes-deleted-and-foreign", "other spaces and deleted sessions"):
        await corp.delete()
        equal(ids(await ChatSession.list(space, tenant="acmecorp")), set(), "deleted session")
        here = ids(await ChatSession.list(space))
        expect(not (here & set(created)), "sessions of another space are listed")


async def session_patch_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    r, rec = run.r, run.rec
    space = await dr.DRMemorySpace.post(a)
    s = await ChatSession.post(space, tenant="acme", topic="billing", chat_id="c1", title="T")

    with r.check("35-session-patch-metadata", "If-Match: 1, full metadata; version 2"):
        mark = rec.mark()
        await s.patch(title="T2")
        sent = rec.only(mark)
        equal(sent.request_headers.get("If-Match"), "1", "If-Match")
        same_json(sent.request_json(), {"metadata": {"title": "T2"}}, "request body")
        equal(sent.status, 200, "status")
        equal((s.version, s.rev, s.title), (2, 2, "T2"), "local")
        got = await ChatSession.get(space, id=s.id)
        equal((got.version, got.rev, got.title), (2, 2, "T2"), "stored")

    with r.check("36-session-patch-range-key", "description only, If-Match: 2; version 3"):
        mark = rec.mark()
        await s.patch(topic="support")
        sent = rec.only(mark)
        equal(sent.request_headers.get("If-Match"), "2", "If-Match")
        same_json(sent.request_json(), {"description": "//chat/acme/support/"}, "request body")
        equal(s.version, 3, "version")
        listed = await ChatSession.list(space, tenant="acme", topic="support")
        equal([x.id for x in listed], [s.id], "listed under the new topic")

    with r.check("37-session-stale-write", "409 'Session version mismatch'; the first write wins"):
        first = await ChatSession.get(space, id=s.id)
        second = await ChatSession.get(space, id=s.id)
        await first.patch(title="x")
        stale = await raises(dr.DRMemoryVersionConflictError, second.patch(title="y"), status=409)
        expect(SESSION_PHRASE in stale.detail.lower(), f"detail {stale.detail!r}")
        equal((await ChatSession.get(space, id=s.id)).title, "x", "stored title")

    path = f"{space.id}/sessions/{s.id}/"
    with r.check("38-if-match-forms", "a quoted If-Match and a missing one both apply"):
        current = (await ChatSession.get(space, id=s.id)).version
        quoted = await a.request(
            "PATCH",
            path,
            json={"metadata": {"title": "q"}},
            extra_headers={"If-Match": f'"{current}"'},
        )
        equal(quoted.json()["version"], current + 1, "version after a quoted If-Match")
        bare = await a.request("PATCH", path, json={"metadata": {"title": "b"}})
        equal(bare.json()["version"], current + 2, "version after no If-Match")

    with r.check("39-patch-lifecycle-strategies", "replaced; identical resend bumps again"):
        fresh = await ChatSession.get(space, id=s.id)
        idle = [{"type": "soft_delete", "trigger": {"idle": 100}}]
        before = fresh.version
        mark = rec.mark()
        await fresh.patch_lifecycle_strategies(idle)
        same_json(rec.only(mark).request_json(), {"lifecycleStrategies": idle}, "request body")
        equal(fresh.version, before + 1, "version")
        equal(fresh.lifecycle_strategies, idle, "strategies")
        await fresh.patch_lifecycle_strategies(idle)
        equal(fresh.version, before + 2, "version after an identical resend")

    with r.check("40-patch-strategies-invalid", "[] and six strategies are 422"):
        fresh = await ChatSession.get(space, id=s.id)
        await raises(
            dr.DRMemoryValidationError,
            fresh.patch_lifecycle_strategies([DEFAULT_STRATEGIES[0]] * 6),
            status=422,
        )
        await raises(
            dr.DRMemoryValidationError,
            a.request(
                "PATCH",
                path,
                json={"lifecycleStrategies": []},
                extra_headers={"If-Match": str(fresh.version)},
            ),
            status=422,
        )

    with r.check("41-events-leave-session-version", "event writes never bump the version"):
        iso = await ChatSession.post(space, tenant="t", topic="v", chat_id="iso", title="a")
        event = await ChatMessage.post(iso, content="one", emitter_type="agent")
        await event.patch(content="two")
        await ChatMessage.post_batch(iso, [{"content": "three", "emitter_type": "agent"}])
        await event.delete()
        await iso.patch(title="b")
        equal(iso.version, 2, "version")

    with r.check(
        "42-patch-answers-carry-version", "every session PATCH answer: version, strategies"
    ):
        answers = [
            x
            for x in rec.exchanges
            if x.method == "PATCH"
            and "/sessions/" in x.path
            and "/events/" not in x.path
            and x.status == 200
        ]
        expect(answers, "no session PATCH was recorded")
        for x in answers:
            body = x.response_json()
            expect(type(body.get("version")) is int, f"version {body.get('version')!r} not an int")
            expect(isinstance(body.get("lifecycleStrategies"), list), "lifecycleStrategies missing")

    with r.check("43-session-delete", "204; get, list and key lookup are 404; key freed"):
        doomed = await ChatSession.post(space, tenant="acme", topic="gone", chat_id="gone")
        await ChatMessage.post(doomed, content="x", emitter_type="agent")
        mark = rec.mark()
        await doomed.delete()
        equal(rec.only(mark).status, 204, "DELETE status")
        await raises(dr.DRMemoryNotFoundError, ChatSession.get(space, id=doomed.id), status=404)
        expect(doomed.id not in {x.id for x in await ChatSession.list(space)}, "still listed")
        await raises(dr.DRMemoryNotFoundError, ChatSession.get(space, chat_id="gone"))
        mark = rec.mark()
        reborn = await ChatSession.post(space, tenant="acme", topic="gone", chat_id="gone")
        equal(rec.only(mark).status, 201, "re-create status")
        expect(reborn.id != doomed.id, "the deleted session came back")
        await raises(dr.DRMemoryNotFoundError, ChatMessage.list(doomed), status=404)


async def event_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    r, rec = run.r, run.rec
    space = await dr.DRMemorySpace.post(a)
    s = await ChatSession.post(space, tenant="t", topic="e", chat_id="e")

    with r.check("44-event-post", "exact body; integer sequenceId; flat emitter fields"):
        mark = rec.mark()
        m = await ChatMessage.post(s, content="hi", emitter_type="agent")
        sent = rec.only(mark)
        same_json(
            sent.request_json(),
            {"type": "message", "body": {"content": "hi"}, "emitter": {"type": "agent"}},
            "request body",
        )
        equal(sent.status, 201, "status")
        answer = sent.response_json()
        expect(type(answer.get("sequenceId")) is int, "sequenceId is not a JSON integer")
        expect(is_iso(answer.get("createdAt")), "createdAt is not ISO-8601")
        same_json(answer.get("body"), {"content": "hi"}, "body")
        equal(
            (answer.get("emitterType"), answer.get("emitterId"), answer.get("eventType")),
            ("agent", None, "message"),
            "emitterType, emitterId, eventType",
        )
        expect(m.sequence_id >= 0, "sequence_id")
        equal((m.emitter_id, m.score, m.content), (None, 0.0, "hi"), "ORM fields")

    with r.check("45-event-post-user", "a participant user emitter with a declared field"):
        u = await ChatMessage.post(s, content="u", emitter_type="user", emitter_id=SYS, score=0.9)
        equal((u.emitter_type, u.emitter_id, u.score), ("user", SYS, 0.9), "fields")

    with r.check("46-event-typed-round-trip", "body JSON echoed exactly; values read back"):
        values: dict[str, Any] = {
            "tags": ["a", "b"],
            "meta": {"k": [1, 2.5, None, {"z": True}], "unicode": "žluťoučký 🐴"},
            "when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
            "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "nested": [Item(name="x", n=1)],
            "opt": None,
            "count": 3,
            "ratio": 1.0,
        }
        mark = rec.mark()
        rich = await RichMessage.post(s, content="rich", emitter_type="agent", **values)
        sent = rec.only(mark)
        same_json(sent.response_json()["body"], sent.request_json()["body"], "echoed body")
        read = next(x for x in await RichMessage.list(s) if x.sequence_id == rich.sequence_id)
        for name, value in values.items():
            equal(getattr(read, name), value, name)

    with r.check("47-sequence-ids", "consecutive, per session, never reused"):
        first, second, third = [
            await ChatMessage.post(s, content=str(i), emitter_type="agent") for i in range(3)
        ]
        equal(
            [second.sequence_id - first.sequence_id, third.sequence_id - second.sequence_id],
            [1, 1],
            "steps",
        )
        other = await ChatSession.post(space, tenant="t", topic="e2", chat_id="e2")
        await ChatMessage.post(other, content="elsewhere", emitter_type="agent")
        fourth = await ChatMessage.post(s, content="3", emitter_type="agent")
        equal(fourth.sequence_id, third.sequence_id + 1, "unaffected by another session")
        await fourth.delete()
        fifth = await ChatMessage.post(s, content="4", emitter_type="agent")
        expect(fifth.sequence_id > fourth.sequence_id, "a deleted sequence id was reused")

    with r.check("48-content-limits", "'' and 100001 chars are 422; 100000 and U+200B are 201"):
        await raises(
            dr.DRMemoryValidationError,
            ChatMessage.post(s, content="", emitter_type="agent"),
            status=422,
        )
        await raises(
            dr.DRMemoryValidationError,
            ChatMessage.post(s, content="x" * 100_001, emitter_type="agent"),
            status=422,
        )
        longest = await ChatMessage.post(s, content="x" * 100_000, emitter_type="agent")
        equal(len(longest.content), 100_000, "length")
        zero_width = await ChatMessage.post(s, content="\u200b", emitter_type="agent")
        equal(zero_width.content, "\u200b", "zero-width content")

    with r.check("49-emitter-validation", "robot 422; stranger user 400; id-less user 400"):
        await raises(
            dr.DRMemoryValidationError,
            ChatMessage.post(s, content="r", emitter_type="robot"),  # type: ignore[arg-type]
            status=422,
        )
        await raises(
            dr.DRMemoryBadRequestError,
            a.request(
                "POST",
                f"{space.id}/sessions/{s.id}/events/",
                json={
                    "type": "message",
                    "body": {"content": "s"},
                    "emitter": {"type": "user", "id": STRANGER},
                },
            ),
            status=400,
        )
        await raises(
            dr.DRMemoryBadRequestError,
            ChatMessage.post(s, content="n", emitter_type="user"),
            status=400,
        )
        agent = await ChatMessage.post(s, content="a", emitter_type="agent", emitter_id=SYS)
        equal((agent.emitter_type, agent.emitter_id), ("agent", SYS), "agent with an id")

    typed = await ChatSession.post(space, tenant="t", topic="types", chat_id="types")
    with r.check("50-event-types", "type filter; unfiltered list has every type; bogus is 422"):
        await ChatMessage.post(typed, content="m", emitter_type="agent")
        await StatusEvent.post(typed, content="s", emitter_type="agent")
        await ToolOutput.post(typed, content="o", emitter_type="agent")
        equal([e.content for e in await ChatMessage.list(typed, type="status")], ["s"], "status")
        equal([e.content for e in await ChatMessage.list(typed, type="tool_output")], ["o"], "tool")
        equal([e.content for e in await ChatMessage.list(typed)], ["m", "s", "o"], "all")
        await raises(dr.DRMemoryValidationError, ChatMessage.list(typed, type="bogus"), status=422)

    paged = await ChatSession.post(space, tenant="t", topic="pages", chat_id="pages")
    five = [await ChatMessage.post(paged, content=f"p{i}", emitter_type="agent") for i in range(5)]
    seq = [e.sequence_id for e in five]
    with r.check("51-event-paging", "offset/limit pages in ascending order"):
        equal(
            [e.sequence_id for e in await ChatMessage.list(paged, offset=0, limit=2)], seq[:2], "0"
        )
        equal(
            [e.sequence_id for e in await ChatMessage.list(paged, offset=2, limit=2)], seq[2:4], "2"
        )
        equal(await ChatMessage.list(paged, offset=10), [], "past the end")

    with r.check("52-event-last", "?lastN only; last N ascending; type filter first"):
        mark = rec.mark()
        equal([e.sequence_id for e in await ChatMessage.last(paged, n=2)], seq[3:], "n=2")
        equal(rec.only(mark).query, [("lastN", "2")], "query")
        equal([e.sequence_id for e in await ChatMessage.last(paged, n=10)], seq, "n=10")
        equal(
            [e.content for e in await ChatMessage.last(typed, n=2, type="message")], ["m"], "typed"
        )
        equal([e.content for e in await ChatMessage.last(typed, n=2)], ["s", "o"], "untyped tail")

    with r.check("53-event-list-bounds", "lastN with offset, n 0/101, limit 0/101 are 422"):
        await raises(
            dr.DRMemoryValidationError,
            a.request(
                "GET",
                f"{space.id}/sessions/{paged.id}/events/",
                params={"lastN": 2, "offset": 0},
            ),
            status=422,
        )
        for n in (0, 101):
            await raises(dr.DRMemoryValidationError, ChatMessage.last(paged, n=n), status=422)
        for limit in (0, 101):
            await raises(
                dr.DRMemoryValidationError, ChatMessage.list(paged, limit=limit), status=422
            )

    with r.check("54-events-under-deleted-space", "list, post and patch are 404"):
        doomed_space = await dr.DRMemorySpace.post(a)
        orphan = await ChatSession.post(doomed_space, tenant="t", topic="o", chat_id="o")
        orphan_event = await ChatMessage.post(orphan, content="o", emitter_type="agent")
        await doomed_space.delete()
        await raises(dr.DRMemoryNotFoundError, ChatMessage.list(orphan), status=404)
        await raises(
            dr.DRMemoryNotFoundError,
            ChatMessage.post(orphan, content="x", emitter_type="agent"),
            status=404,
        )
        await raises(dr.DRMemoryNotFoundError, orphan_event.patch(content="y"), status=404)


async def event_patch_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    r, rec = run.r, run.rec
    space = await dr.DRMemorySpace.post(a)
    s = await ChatSession.post(space, tenant="t", topic="p", chat_id="p")
    m = await ChatMessage.post(s, content="hi", emitter_type="agent")
    u = await ChatMessage.post(s, content="u", emitter_type="user", emitter_id=SYS, score=0.5)
    old = (await ChatMessage.list(s))[0]
    events = f"{space.id}/sessions/{s.id}/events/"

    with r.check("55-event-patch", "?createdAt=<token>, full body; a new, later token"):
        token = m.created_at
        mark = rec.mark()
        await m.patch(score=0.7)
        sent = rec.only(mark)
        equal(sent.query, [("createdAt", token)], "query")
        same_json(sent.request_json(), {"body": {"content": "hi", "score": 0.7}}, "request body")
        equal(sent.status, 200, "status")
        expect(m.created_at != token, "createdAt did not change")
        expect(
            dt.datetime.fromisoformat(m.created_at) > dt.datetime.fromisoformat(token),
            f"new token {m.created_at} is not later than {token}",
        )
        equal((m.score, sent.response_json()["sequenceId"]), (0.7, m.sequence_id), "score, seq")

    with r.check("56-event-patch-again", "the fresh token is accepted"):
        await m.patch(content="hi2")
        equal((m.content, m.score), ("hi2", 0.7), "content and score")

    with r.check("57-event-stale-token", "422 'Patch of incorrect version of event'; no change"):
        stale = await raises(dr.DRMemoryVersionConflictError, old.patch(score=0.1), status=422)
        expect(EVENT_PHRASE in stale.detail.lower(), f"detail {stale.detail!r}")
        stored = next(e for e in await ChatMessage.list(s) if e.sequence_id == m.sequence_id)
        equal((stored.content, stored.score), ("hi2", 0.7), "stored body")

    with r.check("58-event-token-forms", "no token applies; +00:00 and a raw '+' are accepted"):
        free = await a.request(
            "PATCH", f"{events}{m.sequence_id}/", json={"body": {"content": "f"}}
        )
        token = free.json()["createdAt"]
        offset_form = dt.datetime.fromisoformat(token).isoformat()  # ...+00:00
        expect(offset_form.endswith("+00:00"), f"{offset_form!r} has no +00:00 offset")
        encoded = await a.request(
            "PATCH",
            f"{events}{m.sequence_id}/",
            params={"createdAt": offset_form},
            json={"body": {"content": "g"}},
        )
        raw_plus = dt.datetime.fromisoformat(encoded.json()["createdAt"]).isoformat()
        await a.request(
            "PATCH",
            f"{events}{m.sequence_id}/?createdAt={raw_plus}",
            json={"body": {"content": "h"}},
        )

    with r.check("59-event-patch-stranger-user", "400 DRMemoryBadRequestError"):
        fresh = next(e for e in await ChatMessage.list(s) if e.sequence_id == m.sequence_id)
        await raises(
            dr.DRMemoryBadRequestError,
            fresh.patch(emitter_type="user", emitter_id=STRANGER),
            status=400,
        )

    with r.check("60-event-user-to-agent", "emitter {'type':'agent','id':SYS} -> 200"):
        mark = rec.mark()
        await u.patch(emitter_type="agent")
        same_json(rec.only(mark).request_json(), {"emitter": {"type": "agent", "id": SYS}}, "body")
        equal((u.emitter_type, u.emitter_id), ("agent", SYS), "emitter")

    with r.check("61-event-patch-errors", "unknown seq is 404; a body without content is 422"):
        await raises(
            dr.DRMemoryNotFoundError,
            a.request("PATCH", f"{events}999999/", json={"body": {"content": "x"}}),
            status=404,
        )
        await raises(
            dr.DRMemoryValidationError,
            a.request("PATCH", f"{events}{m.sequence_id}/", json={"body": {"score": 1.0}}),
            status=422,
        )

    with r.check("62-patch-batch", "tokens and bodies sent; integer ids and new tokens back"):
        m1, m2 = (await ChatMessage.list(s))[:2]
        tokens = (m1.created_at, m2.created_at)
        # The ORM layers the new type over the current id (SYS here, kept since check 60).
        m2_emitter = {"type": "agent", **({"id": m2.emitter_id} if m2.emitter_id else {})}
        mark = rec.mark()
        await ChatMessage.patch_batch(
            s, [(m1, {"score": 0.9}), (m2, {"content": "edited", "emitter_type": "agent"})]
        )
        sent = rec.only(mark)
        items = sent.request_json()["events"]
        equal([i["sequenceId"] for i in items], [m1.sequence_id, m2.sequence_id], "ids sent")
        equal(tuple(i["createdAt"] for i in items), tokens, "tokens sent")
        equal(items[1].get("emitter"), m2_emitter, "emitter sent")
        equal(sent.status, 200, "status")
        for item in sent.response_json()["items"]:
            expect(type(item["sequenceId"]) is int, "sequenceId is not a JSON integer")
            expect(item["createdAt"] not in tokens, "createdAt was not renewed")
        equal((m1.score, m2.content), (0.9, "edited"), "updated in place")
        await m1.patch(score=0.95)

    with r.check("63-patch-batch-stale", "one stale token: 422 and neither event changes"):
        stale_m2 = m2.model_copy()
        await m2.patch(score=0.2)
        await raises(
            dr.DRMemoryVersionConflictError,
            ChatMessage.patch_batch(s, [(m1, {"score": 0.1}), (stale_m2, {"score": 0.3})]),
            status=422,
        )
        scores = {e.sequence_id: e.score for e in await ChatMessage.list(s)}
        equal((scores[m1.sequence_id], scores[m2.sequence_id]), (0.95, 0.2), "stored scores")

    with r.check("64-patch-batch-validation", "duplicates, id-only items, 201 items are 422"):
        for events_body in (
            [{"sequenceId": m1.sequence_id, "body": {"content": "a"}}] * 2,
            [{"sequenceId": m1.sequence_id}],
            [{"sequenceId": m1.sequence_id + i, "body": {"content": "a"}} for i in range(201)],
        ):
            await raises(
                dr.DRMemoryValidationError,
                a.request("PATCH", f"{events}batch/", json={"events": events_body}),
                status=422,
            )


async def batch_and_delete_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    r, rec = run.r, run.rec
    space = await dr.DRMemorySpace.post(a)
    s = await ChatSession.post(space, tenant="t", topic="b", chat_id="b")
    events = f"{space.id}/sessions/{s.id}/events/"

    with r.check("65-post-batch", "201, input order, consecutive sequence ids"):
        mark = rec.mark()
        batch = await ChatMessage.post_batch(
            s,
            [
                {"content": "a", "emitter_type": "agent"},
                {"content": "b", "emitter_type": "user", "emitter_id": SYS, "score": 1},
            ],
        )
        equal(rec.only(mark).status, 201, "status")
        equal([e.content for e in batch], ["a", "b"], "contents")
        equal(batch[1].sequence_id, batch[0].sequence_id + 1, "consecutive")
        equal((batch[1].emitter_id, batch[1].score), (SYS, 1.0), "second item")

    with r.check("66-post-batch-atomic", "a bad second item: 422 and nothing created"):
        before = len(await ChatMessage.list(s))
        await raises(
            dr.DRMemoryValidationError,
            ChatMessage.post_batch(
                s,
                [
                    {"content": "a", "emitter_type": "agent"},
                    {"content": "", "emitter_type": "agent"},
                ],
            ),
            status=422,
        )
        equal(len(await ChatMessage.list(s)), before, "event count")

    with r.check("67-post-batch-cap", "201 items are 422"):
        item = {"type": "message", "body": {"content": "x"}, "emitter": {"type": "agent"}}
        await raises(
            dr.DRMemoryValidationError,
            a.request("POST", f"{events}batch/", json={"events": [item] * 201}),
            status=422,
        )

    with r.check("68-event-delete", "204; gone from list and last; later writes are 404"):
        keep = batch[0]
        gone = batch[1]
        mark = rec.mark()
        await gone.delete()
        equal(rec.only(mark).status, 204, "DELETE status")
        expect(gone.sequence_id not in [e.sequence_id for e in await ChatMessage.list(s)], "listed")
        expect(
            gone.sequence_id not in [e.sequence_id for e in await ChatMessage.last(s, n=5)], "last"
        )
        await raises(dr.DRMemoryNotFoundError, gone.patch(content="z"), status=404)
        await raises(dr.DRMemoryNotFoundError, gone.delete(), status=404)
        await raises(
            dr.DRMemoryNotFoundError,
            ChatMessage.patch_batch(s, [(keep, {"content": "k"}), (gone, {"content": "z"})]),
            status=404,
        )
        stored = next(e for e in await ChatMessage.list(s) if e.sequence_id == keep.sequence_id)
        equal(stored.content, "a", "the other event of the failed batch")


async def isolation_checks(
    run: Run, a: dr.DRMemoryServiceClient, b: dr.DRMemoryServiceClient
) -> None:
    r = run.r
    space = await dr.DRMemorySpace.post(a, description="a's")

    with r.check("71-principals-isolated", "B cannot get, list or post into A's space"):
        await raises(dr.DRMemoryNotFoundError, dr.DRMemorySpace.get(b, space.id), status=404)
        expect(space.id not in {x.id for x in await all_spaces(b)}, "listed for B")
        await raises(
            dr.DRMemoryNotFoundError,
            ChatSession.post(space_as(space, b), tenant="t", topic="x", chat_id="x"),
            status=404,
        )

    with r.check("72-shared-http-client", "two tokens over one pool each see only their spaces"):
        theirs = await dr.DRMemorySpace.post(b, description="b's")
        mine = {x.id for x in await all_spaces(a)}
        their_list = {x.id for x in await all_spaces(b)}
        expect(space.id in mine and theirs.id not in mine, "A's list is wrong")
        expect(theirs.id in their_list and space.id not in their_list, "B's list is wrong")


async def chat_history_checks(run: Run, a: dr.DRMemoryServiceClient) -> None:
    """§15 73-75: the SDK's chat-history layer, built on the ORM, end to end."""
    r = run.r
    space = await dr.DRMemorySpace.post(a)
    registry = ch.ChatSessionRegistry(space)
    chats = ch.ChatRepository(space, registry)
    messages = ch.MessageRepository(space, registry)
    user = uuid.uuid4()

    with r.check("73-chat-create-idempotent", "same chat by thread id; no duplicate session"):
        chat = await chats.create_chat(ch.ChatCreate(user_uuid=user, thread_id="t1", name="N"))
        found = await chats.get_chat_by_thread_id(user, "t1")
        expect(found is not None, "get_chat_by_thread_id found nothing")
        equal((found.id, found.chat_uuid, found.name), (chat.id, chat.chat_uuid, "N"), "found")
        again = await chats.create_chat(ch.ChatCreate(user_uuid=user, thread_id="t1"))
        equal(again.id, chat.id, "second create_chat")
        equal([x.id for x in await ch.Chat.list(space)], [chat.id], "chat sessions")
        # A cold registry (another replica) resolves the chat through its locator session.
        cold = ch.ChatRepository(space, ch.ChatSessionRegistry(space))
        renamed = await cold.update_chat_name(chat.chat_uuid, "renamed")
        expect(renamed is not None, "update_chat_name through a cold registry found nothing")
        equal((renamed.name, renamed.version), ("renamed", 2), "renamed chat")

    with r.check("74-message-read-modify-write", "patch chains advance the createdAt token"):
        message = await messages.create_message(
            ch.MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content="")
        )
        await messages.update_message(message.message_uuid, ch.MessageUpdate(content="Hello"))
        call = await messages.create_message_tool_call(
            ch.MessageToolCallCreate(message_uuid=message.message_uuid, name="search")
        )
        await messages.update_message_tool_call(
            call.uuid, ch.MessageToolCallUpdate(content="found", in_progress=False)
        )
        await messages.update_message(
            message.message_uuid, ch.MessageUpdate(in_progress=False, status="completed")
        )
        second = await messages.create_message(
            ch.MessageCreate(chat_uuid=chat.chat_uuid, role="user", content="thanks")
        )
        # Read back through cold caches, as another replica would.
        fresh = ch.MessageRepository(space, ch.ChatSessionRegistry(space))
        history = await fresh.get_chat_messages(chat.chat_uuid)
        equal(
            [m.message_uuid for m in history],
            [message.message_uuid, second.message_uuid],
            "messages in sequence order",
        )
        first = history[0]
        equal(
            (first.content, first.in_progress, first.status), ("Hello", False, "completed"), "msg"
        )
        equal(len(first.tool_calls), 1, "tool calls")
        tool = first.tool_calls[0]
        equal((tool.name, tool.arguments, tool.content), ("search", "", "found"), "tool call")
        expect(tool.in_progress is False, "tool call still in progress")
        got = await fresh.get_message(message.message_uuid)
        expect(got is not None and got.content == "Hello", "get_message through a cold cache")

    with r.check("75-delete-chat", "returns the chat; messages then read as empty / None"):
        deleted = await chats.delete_chat(chat.chat_uuid)
        expect(deleted is not None and deleted.id == chat.id, "delete_chat did not return it")
        equal(list(await messages.get_chat_messages(chat.chat_uuid)), [], "messages")
        equal(await messages.get_message(message.message_uuid), None, "get_message")
        await raises(dr.DRMemoryNotFoundError, ch.Chat.get(space, id=chat.id), status=404)


def space_as(space: dr.DRMemorySpace, client: dr.DRMemoryServiceClient) -> dr.DRMemorySpace:
    """The same space id, addressed by another principal's client."""
    return dr.DRMemorySpace(client, id=space.id, user_id="", tenant_id="")


def wire_invariants(run: Run) -> None:
    r, rec = run.r, run.rec
    prefix = urlsplit(run.endpoint).path + "/memory/"
    base = httpx.URL(run.endpoint + "/memory")
    orm = [x for x in rec.exchanges if x.url.host == base.host and x.url.port == base.port]

    with r.check("01-every-request-under-memory-with-slash", f"{len(orm)} requests"):
        for x in orm:
            expect(x.path.startswith(prefix), f"{x.method} {x.url} is outside {prefix}")
            expect(x.path.endswith("/"), f"{x.method} {x.url} has no trailing slash")
            expect(not 300 <= x.status < 400, f"{x.method} {x.url} answered {x.status}")
            expect(
                x.request_headers.get("Content-Type") == "application/json"
                and x.request_headers.get("Accept") == "application/json",
                f"{x.method} {x.url} lacks the JSON headers",
            )

    with r.check("04-success-bodies-are-json-objects", "and DELETE answers 204 (or JSON)"):
        for x in orm:
            if x.status >= 300:
                continue
            if x.method == "DELETE" and x.status == 204:
                equal(x.response_body, b"", f"204 body of {x.url}")
                continue
            equal(x.response_headers.get("Content-Type"), "application/json", f"type of {x.url}")
            expect(isinstance(x.response_json(), dict), f"{x.method} {x.url}: not an object")

    with r.check("69-error-bodies", "every 4xx body has a string detail or a list with msg"):
        errors = [x for x in orm if 400 <= x.status < 500]
        expect(errors, "no 4xx was recorded")
        for x in errors:
            body = x.response_json()
            expect(isinstance(body, dict), f"{x.method} {x.url}: {x.status} body not an object")
            detail = body.get("detail")
            ok = (isinstance(detail, str) and detail) or (
                isinstance(detail, list)
                and detail
                and isinstance(detail[0], dict)
                and isinstance(detail[0].get("msg"), str)
            )
            expect(ok, f"{x.method} {x.url}: {x.status} detail {detail!r}")

    with r.check("72-no-cookies", "the emulator sets no cookies"):
        for x in orm:
            expect("set-cookie" not in x.response_headers, f"{x.method} {x.url} set a cookie")


async def run_faults(run: Run, token: str) -> None:
    """Typed errors for the faults the caller armed on ``GET space-list``, in this order.

    1. 429 with ``Retry-After: 30``; 2. 429 without it; 3. 503; 4. a dropped connection.
    The fifth list is answered normally.
    """
    r = run.r
    client = run.client(token)
    with r.check("76-quota-429-retry-after", "DRMemoryRateLimitError, retry_after == 30"):
        quota = await raises(dr.DRMemoryRateLimitError, dr.DRMemorySpace.list(client), status=429)
        equal(quota.retry_after, 30, "retry_after")
    with r.check("76-storage-cap-429", "DRMemoryRateLimitError, retry_after is None"):
        cap = await raises(dr.DRMemoryRateLimitError, dr.DRMemorySpace.list(client), status=429)
        equal(cap.retry_after, None, "retry_after")
    with r.check("fault-503", "DRMemoryServiceError with status_code 503"):
        await raises(dr.DRMemoryServiceError, dr.DRMemorySpace.list(client), status=503, exact=True)
    with r.check("fault-dropped-connection", "DRMemoryUnavailableError, status_code None"):
        await raises(dr.DRMemoryUnavailableError, dr.DRMemorySpace.list(client), status=None)
    with r.check("fault-recovered", "the next request is answered normally"):
        await dr.DRMemorySpace.list(client)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:8000/api/v2")
    parser.add_argument("--token-a", required=True, help="bearer token of the first principal")
    parser.add_argument("--token-b", required=True, help="bearer token of a second principal")
    parser.add_argument("--scenario", choices=("checklist", "faults"), default="checklist")
    args = parser.parse_args(argv)
    if args.token_a == args.token_b:
        parser.error("--token-a and --token-b must differ: they are two principals")

    results = Results()
    recorder = Recorder()
    # The documented multi-principal pattern: one identity-free pool, one client per token.
    no_cookies = http.cookiejar.CookieJar(
        policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
    )
    async with httpx.AsyncClient(
        timeout=30.0, cookies=no_cookies, event_hooks={"response": [recorder.on_response]}
    ) as pool:
        run = Run(results, args.endpoint, pool, recorder)
        if args.scenario == "faults":
            await run_faults(run, args.token_a)
        else:
            await run_checklist(run, args.token_a, args.token_b)
    print(f"{results.count - results.failed} passed, {results.failed} failed", file=sys.stderr)
    return 1 if results.failed or not results.count else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
