"""``DefaultStepStore``: the StepStore contract, run against the harness's own reference stores
and ours (differential), plus what only ours does (owner partitioning, anonymous degrading).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.test import RequestFactory
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai_harness.step_persistence import (
    ContinuableSnapshot,
    InMemoryStepStore,
    RunRecord,
    SqliteStepStore,
    StepEvent,
    StepPersistence,
    StepStore,
    ToolEffectRecord,
)

from django_pydantic_agent.contrib.store.models import (
    StoredMemoryOperation,
    StoredRun,
    StoredSnapshot,
    StoredSnapshotKey,
    StoredStepEvent,
    StoredToolEffect,
)
from django_pydantic_agent.contrib.store.step_store import DefaultStepStore
from tests.contrib.store.harness_support import anonymous_request, user_request

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
StoreFactory = Callable[..., Any]


@pytest.fixture(
    params=[
        "in_memory",
        "sqlite",
        pytest.param("django", marks=pytest.mark.django_db(transaction=True)),
    ]
)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory of empty stores of one kind; ``max_snapshots_per_run`` is passed through."""
    kind = request.param
    if kind == "in_memory":
        return lambda **kw: InMemoryStepStore(**kw)
    if kind == "sqlite":
        return lambda **kw: SqliteStepStore(database=tmp_path / "steps.db", media_store=None, **kw)
    owner_request = user_request(1)
    return lambda **kw: DefaultStepStore(owner_request, **kw)


@pytest.fixture
def store(make_store: StoreFactory) -> Any:
    return make_store()


def _run(run_id: str, *, started: datetime = T0, **kw: Any) -> RunRecord:
    return RunRecord(run_id=run_id, started_at=started, **kw)


def _event(run_id: str, kind: Any = "model_request_started", **kw: Any) -> StepEvent:
    return StepEvent(run_id=run_id, kind=kind, step_index=kw.pop("step_index", 1), **kw)


def _messages(text: str = "hi") -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(content=text, timestamp=T0)]),
        ModelResponse(parts=[TextPart(content=f"echo {text}")], timestamp=T0),
    ]


def _snapshot(run_id: str, step: int, **kw: Any) -> ContinuableSnapshot:
    return ContinuableSnapshot(
        run_id=run_id, step_index=step, messages=kw.pop("messages", _messages()), timestamp=T0, **kw
    )


# The contract, for every store


def test_every_store_satisfies_the_protocol(store: Any) -> None:
    assert isinstance(store, StepStore)
    assert callable(getattr(store, "list_snapshots", None))  # conversation_search needs it


async def test_registered_run_round_trips(store: Any) -> None:
    record = _run(
        "run-1",
        conversation_id="thread-1",
        parent_run_id="parent",
        agent_name="helper",
        metadata={"tenant": "acme"},
        started=T0 + timedelta(microseconds=123),
        registration_id="reg-1",
    )
    await store.register_run(record)

    assert await store.get_run(run_id="run-1") == record
    assert await store.get_run(run_id="missing") is None


async def test_list_runs_is_oldest_first_with_anded_filters(store: Any) -> None:
    await store.register_run(_run("late", started=T0 + timedelta(hours=2), conversation_id="c1"))
    await store.register_run(_run("early", started=T0, conversation_id="c1", parent_run_id="p"))
    await store.register_run(_run("middle", started=T0 + timedelta(hours=1), conversation_id="c2"))

    everything = await store.list_runs()
    assert [r.run_id for r in everything] == ["early", "middle", "late"]
    assert everything[-1].run_id == "late"  # the idiom the protocol promises
    assert [r.run_id for r in await store.list_runs(conversation_id="c1")] == ["early", "late"]
    both = await store.list_runs(conversation_id="c1", parent_run_id="p")
    assert [r.run_id for r in both] == ["early"]
    assert await store.list_runs(conversation_id="c2", parent_run_id="p") == []


async def test_events_keep_insertion_order_not_timestamp_order(store: Any) -> None:
    for index, kind in enumerate(["run_started", "model_request_started", "run_completed"]):
        await store.append_event(
            _event("run-1", kind, step_index=0, timestamp=T0 - timedelta(minutes=index))
        )

    events = await store.list_events(run_id="run-1")
    assert [e.kind for e in events] == ["run_started", "model_request_started", "run_completed"]
    assert await store.list_events(run_id="other") == []


async def test_a_keyed_event_appends_once_while_unkeyed_events_always_append(store: Any) -> None:
    keyed = _event("run-1", idempotency_key="0:1:model_request_started:")
    await store.append_event(keyed)
    await store.append_event(keyed)
    await store.append_event(_event("run-1", tool_call_id="c1", metadata={"a": "b"}))
    await store.append_event(_event("run-1", tool_call_id="c1", metadata={"a": "b"}))
    await store.append_event(_event("run-2", idempotency_key="0:1:model_request_started:"))

    events = await store.list_events(run_id="run-1")
    assert len(events) == 3
    assert events[0] == keyed
    assert events[1].metadata == {"a": "b"}
    assert len(await store.list_events(run_id="run-2")) == 1


async def test_latest_snapshot_follows_write_order_not_step_index(store: Any) -> None:
    await store.save_snapshot(_snapshot("run-1", 5, messages=_messages("first")))
    await store.save_snapshot(_snapshot("run-1", 1, messages=_messages("second")))

    latest = await store.latest_snapshot(run_id="run-1")
    assert latest is not None
    assert latest.step_index == 1
    assert latest.messages == _messages("second")
    assert await store.latest_snapshot(run_id="other") is None


async def test_interrupted_snapshots_are_skipped_unless_asked(store: Any) -> None:
    await store.save_snapshot(_snapshot("run-1", 1))
    await store.save_snapshot(_snapshot("run-1", 2, state="interrupted"))

    default = await store.latest_snapshot(run_id="run-1")
    assert default is not None
    assert default.step_index == 1
    newest = await store.latest_snapshot(run_id="run-1", include_interrupted=True)
    assert newest is not None
    assert (newest.step_index, newest.state) == (2, "interrupted")
    assert [s.step_index for s in await store.list_snapshots(run_id="run-1")] == [1]
    every = await store.list_snapshots(run_id="run-1", include_interrupted=True)
    assert [s.step_index for s in every] == [1, 2]


async def test_only_interrupted_snapshots_means_no_resumable_one(store: Any) -> None:
    await store.save_snapshot(_snapshot("run-1", 1, state="interrupted"))
    assert await store.latest_snapshot(run_id="run-1") is None


async def test_a_snapshot_key_applies_once(store: Any) -> None:
    await store.save_snapshot(_snapshot("run-1", 1, idempotency_key="0:1:complete"))
    await store.save_snapshot(_snapshot("run-1", 1, idempotency_key="0:1:complete"))

    snapshots = await store.list_snapshots(run_id="run-1")
    assert len(snapshots) == 1
    assert snapshots[0].idempotency_key == "0:1:complete"


async def test_retention_keeps_newest_n_and_newest_complete_and_remembers_keys(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_snapshots_per_run=2)
    await store.save_snapshot(_snapshot("run-1", 1, idempotency_key="0:1:complete"))
    for seq in (1, 2, 3):
        await store.save_snapshot(
            _snapshot("run-1", seq + 1, state="interrupted", idempotency_key=f"{seq}:x:interrupted")
        )

    kept = await store.list_snapshots(run_id="run-1", include_interrupted=True)
    assert [s.step_index for s in kept] == [1, 3, 4]
    latest = await store.latest_snapshot(run_id="run-1")
    assert latest is not None
    assert latest.step_index == 1

    # A pruned snapshot's key is still spent: retrying that save changes nothing.
    await store.save_snapshot(
        _snapshot("run-1", 2, state="interrupted", idempotency_key="1:x:interrupted")
    )
    again = await store.list_snapshots(run_id="run-1", include_interrupted=True)
    assert [s.step_index for s in again] == [1, 3, 4]


async def test_messages_round_trip_exactly(store: Any) -> None:
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                UserPromptPart(
                    content=[
                        "look",
                        BinaryContent(data=b"\x89PNG\x00\xff", media_type="image/png"),
                    ],
                    timestamp=T0,
                )
            ]
        ),
        ModelResponse(
            parts=[
                ThinkingPart(content="hmm", signature="sig-abc", provider_name="anthropic"),
                ToolCallPart(tool_name="lookup", args={"q": "é"}, tool_call_id="call-1"),
            ],
            timestamp=T0,
            model_name="m",
        ),
    ]
    await store.save_snapshot(_snapshot("run-1", 1, messages=messages))

    latest = await store.latest_snapshot(run_id="run-1")
    assert latest is not None
    # Compared as JSON: a reloaded BinaryContent comes back as its BinaryImage subclass.
    assert ModelMessagesTypeAdapter.dump_json(
        latest.messages
    ) == ModelMessagesTypeAdapter.dump_json(messages)
    assert latest.messages[1].parts[0] == messages[1].parts[0]  # the thinking signature


async def test_tool_effects_upsert_and_unresolved_means_started(store: Any) -> None:
    started = ToolEffectRecord(
        tool_call_id="c1", tool_name="pay", run_id="run-1", status="started", started_at=T0
    )
    await store.record_tool_effect(started)
    await store.record_tool_effect(
        ToolEffectRecord(tool_call_id="c2", tool_name="look", run_id="run-1", status="started")
    )
    assert [r.tool_call_id for r in await store.list_unresolved_tool_effects(run_id="run-1")] == [
        "c1",
        "c2",
    ]

    done = ToolEffectRecord(
        tool_call_id="c1",
        tool_name="pay",
        run_id="run-1",
        status="completed",
        started_at=T0,
        ended_at=T0 + timedelta(seconds=3),
        idempotency_key="pay-1",
        effect_summary="charged 5 EUR",
    )
    await store.record_tool_effect(done)

    assert await store.get_tool_effect(run_id="run-1", tool_call_id="c1") == done
    unresolved = await store.list_unresolved_tool_effects(run_id="run-1")
    assert [r.tool_call_id for r in unresolved] == ["c2"]
    assert await store.get_tool_effect(run_id="run-2", tool_call_id="c1") is None


async def test_registering_a_run_id_twice_is_refused(make_store: StoreFactory) -> None:
    store = make_store()
    if isinstance(store, InMemoryStepStore):
        pytest.skip("InMemoryStepStore overwrites silently; the database stores refuse.")
    await store.register_run(_run("run-1", agent_name="first"))

    with pytest.raises((ValueError, sqlite3.IntegrityError)):
        await store.register_run(_run("run-1", agent_name="second"))
    kept = await store.get_run(run_id="run-1")
    assert kept is not None
    assert kept.agent_name == "first"


# Ours only: owners, anonymous visitors, errors


@pytest.mark.django_db(transaction=True)
async def test_another_users_run_is_invisible_even_by_its_exact_id() -> None:
    alice = DefaultStepStore(user_request(1))
    bob = DefaultStepStore(user_request(2))
    await alice.register_run(_run("run-1", conversation_id="t1"))
    await alice.append_event(_event("run-1"))
    await alice.save_snapshot(_snapshot("run-1", 1))
    await alice.record_tool_effect(
        ToolEffectRecord(tool_call_id="c1", tool_name="t", run_id="run-1", status="started")
    )

    assert await bob.get_run(run_id="run-1") is None
    assert await bob.list_runs() == []
    assert await bob.list_runs(conversation_id="t1") == []
    assert await bob.list_events(run_id="run-1") == []
    assert await bob.latest_snapshot(run_id="run-1", include_interrupted=True) is None
    assert await bob.list_snapshots(run_id="run-1", include_interrupted=True) == []
    assert await bob.get_tool_effect(run_id="run-1", tool_call_id="c1") is None
    assert await bob.list_unresolved_tool_effects(run_id="run-1") == []

    # Bob may use the same run id: it is his own run, and Alice's stays untouched.
    await bob.register_run(_run("run-1", agent_name="bobs"))
    await bob.record_tool_effect(
        ToolEffectRecord(tool_call_id="c1", tool_name="t", run_id="run-1", status="failed")
    )
    alice_run = await alice.get_run(run_id="run-1")
    assert alice_run is not None
    assert alice_run.agent_name is None
    alice_effect = await alice.get_tool_effect(run_id="run-1", tool_call_id="c1")
    assert alice_effect is not None
    assert alice_effect.status == "started"


@pytest.mark.django_db(transaction=True)
async def test_two_anonymous_sessions_are_separate_owners() -> None:
    first = DefaultStepStore(
        await sync_to_async(anonymous_request)(session=True), allow_anonymous=True
    )
    second = DefaultStepStore(
        await sync_to_async(anonymous_request)(session=True), allow_anonymous=True
    )
    await first.register_run(_run("run-1"))
    await first.append_event(_event("run-1"))

    assert [r.run_id for r in await first.list_runs()] == ["run-1"]
    assert await second.get_run(run_id="run-1") is None
    assert await second.list_events(run_id="run-1") == []
    owners = [owner async for owner in StoredRun.objects.values_list("owner_id", flat=True)]
    assert len(owners) == 1
    assert owners[0].startswith("anon:")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("allow_anonymous", "session"), [(False, True), (True, False)], ids=["refused", "no-session"]
)
async def test_an_anonymous_request_that_is_not_served_writes_nothing(
    allow_anonymous: bool, session: bool, caplog: pytest.LogCaptureFixture
) -> None:
    request = await sync_to_async(anonymous_request)(session=session)
    store = DefaultStepStore(request, allow_anonymous=allow_anonymous)
    with caplog.at_level(logging.DEBUG, logger="django_pydantic_agent.contrib.store"):
        await store.register_run(_run("run-1"))
    expected = f"DefaultStepStore(allow_anonymous={allow_anonymous}) stores nothing"
    assert expected in caplog.text
    assert request.session.session_key is None or request.session.session_key not in caplog.text
    await store.append_event(_event("run-1"))
    await store.save_snapshot(_snapshot("run-1", 1))
    await store.record_tool_effect(
        ToolEffectRecord(tool_call_id="c1", tool_name="t", run_id="run-1", status="started")
    )

    assert await store.get_run(run_id="run-1") is None
    assert await store.list_runs() == []
    assert await store.list_events(run_id="run-1") == []
    assert await store.latest_snapshot(run_id="run-1") is None
    assert await store.list_snapshots(run_id="run-1") == []
    assert await store.get_tool_effect(run_id="run-1", tool_call_id="c1") is None
    for model in (StoredRun, StoredStepEvent, StoredSnapshot, StoredToolEffect):
        assert await model.objects.acount() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_duplicate_run_raises_a_value_error_naming_the_run() -> None:
    store = DefaultStepStore(user_request(1))
    await store.register_run(_run("run-7"))

    with pytest.raises(ValueError, match="'run-7' is already registered"):
        await store.register_run(_run("run-7"))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_retention_bound_is_checked_at_construction(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_snapshots_per_run must be an int >= 1 or None"):
        DefaultStepStore(RequestFactory().get("/"), max_snapshots_per_run=bad)


@pytest.mark.django_db(transaction=True)
async def test_a_damaged_snapshot_row_is_skipped_by_list_but_not_hidden_by_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DefaultStepStore(user_request(1))
    await store.save_snapshot(_snapshot("run-1", 1))
    await store.save_snapshot(_snapshot("run-1", 2))
    await store.save_snapshot(_snapshot("run-1", 3))
    damaged = await StoredSnapshot.objects.filter(step_index=2).aupdate(messages=[{"kind": "?"}])
    assert damaged == 1
    await StoredSnapshot.objects.filter(step_index=3).aupdate(state="paused")

    with caplog.at_level(logging.WARNING):
        snapshots = await store.list_snapshots(run_id="run-1", include_interrupted=True)
    assert [s.step_index for s in snapshots] == [1]
    assert "Skipping unparsable snapshot row" in caplog.text


@pytest.mark.django_db(transaction=True)
async def test_rows_the_harness_cannot_represent_raise_on_read() -> None:
    store = DefaultStepStore(user_request(1))
    await store.append_event(_event("run-1"))
    await store.record_tool_effect(
        ToolEffectRecord(tool_call_id="c1", tool_name="t", run_id="run-1", status="started")
    )
    await StoredStepEvent.objects.aupdate(kind="model_exploded")
    await StoredToolEffect.objects.aupdate(status="maybe")

    with pytest.raises(ValueError, match="'model_exploded'"):
        await store.list_events(run_id="run-1")
    with pytest.raises(ValueError, match="'maybe'"):
        await store.get_tool_effect(run_id="run-1", tool_call_id="c1")


@pytest.mark.django_db
def test_rows_name_themselves_readably() -> None:
    run = StoredRun(run_id="run-1", owner_id="1", started_at=T0)
    event = StoredStepEvent(run_id="run-1", kind="run_started", step_index=0, timestamp=T0)
    snapshot = StoredSnapshot(run_id="run-1", step_index=3, timestamp=T0)
    effect = StoredToolEffect(tool_call_id="c1", tool_name="pay", run_id="run-1", started_at=T0)
    key = StoredSnapshotKey(run_id="run-1", idempotency_key="0:1:complete")
    receipt = StoredMemoryOperation(operation_id="op-1", fingerprint="f", existed=False)

    assert [str(row) for row in (run, event, snapshot, effect, key, receipt)] == [
        "run-1",
        "run-1 run_started",
        "run-1 step 3",
        "pay (c1)",
        "0:1:complete",
        "op-1",
    ]


# End to end: the harness capability drives ours exactly as it drives its own store


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "tea"}, tool_call_id="call-1")])
    return ModelResponse(parts=[TextPart("tea is nice")])


def lookup(q: str) -> str:
    return f"facts about {q}"


async def _trail(store: Any) -> tuple[list[tuple[str, int]], list[int], list[str]]:
    agent = Agent(
        FunctionModel(_script),
        tools=[lookup],
        capabilities=[StepPersistence(store=store, agent_name="assistant")],
    )
    await agent.run("tell me about tea", conversation_id="thread-1")
    (run,) = await store.list_runs(conversation_id="thread-1")
    events = await store.list_events(run_id=run.run_id)
    snapshots = await store.list_snapshots(run_id=run.run_id, include_interrupted=True)
    effects = [
        effect.status
        for effect in [await store.get_tool_effect(run_id=run.run_id, tool_call_id="call-1")]
        if effect is not None
    ]
    return (
        [(e.kind, e.step_index) for e in events],
        [len(s.messages) for s in snapshots],
        effects,
    )


@pytest.mark.django_db(transaction=True)
async def test_step_persistence_writes_the_same_trail_as_the_reference_store() -> None:
    ours = DefaultStepStore(user_request(1))

    expected = await _trail(InMemoryStepStore())
    assert await _trail(ours) == expected
    kinds = [kind for kind, _ in expected[0]]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_completed"
    assert expected[2] == ["completed"]


class PerRequestStepPersistence(StepPersistence):
    """The wiring docs/harness-stores.md shows for an agent built once, at mount time."""

    async def for_run(self, ctx: Any) -> Any:
        run = await super().for_run(ctx)
        assert isinstance(run, StepPersistence)
        return replace(run, store=DefaultStepStore(ctx.deps.request))


@dataclass(frozen=True)
class Deps:
    user: Any
    request: HttpRequest


@pytest.mark.django_db(transaction=True)
async def test_an_agent_built_once_records_each_run_under_its_callers_owner() -> None:
    agent = Agent(
        FunctionModel(_script),
        tools=[lookup],
        deps_type=Deps,
        capabilities=[PerRequestStepPersistence(agent_name="assistant")],
    )
    alice, bob = user_request(1), user_request(2)
    await agent.run("tea?", deps=Deps(user=alice.user, request=alice), conversation_id="t-a")
    await agent.run("tea?", deps=Deps(user=bob.user, request=bob), conversation_id="t-b")

    alice_runs = await DefaultStepStore(alice).list_runs()
    bob_runs = await DefaultStepStore(bob).list_runs()
    assert [run.conversation_id for run in alice_runs] == ["t-a"]
    assert [run.conversation_id for run in bob_runs] == ["t-b"]
