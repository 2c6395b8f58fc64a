"""The options check themselves; one route table drives the views and ``urlpatterns``; the
adapter is built once per run."""

from __future__ import annotations

from typing import Any

import pytest

from django_pydantic_agent.agui import (
    AccessPolicy,
    AGUIServer,
    AttachmentOptions,
    MountOptions,
    RunOptions,
    UnsafeCSRFExemptionWarning,
    inner,
    run,
)
from django_pydantic_agent.agui.options import csrf_exemption
from django_pydantic_agent.agui.views import AGUIView
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from tests.agui.agents import text_agent
from tests.agui.conftest import event_types, logged_in, run_body


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: RunOptions(heartbeat_seconds=-1), ValueError, "heartbeat_seconds=-1"),
        (lambda: RunOptions(heartbeat_seconds="15"), TypeError, "heartbeat_seconds='15'"),
        (lambda: RunOptions(stream_coalesce_seconds="2ms"), TypeError, "'2ms' is not a number"),
        (lambda: RunOptions(stream_coalesce_seconds=-0.5), ValueError, "coalesce_seconds=-0.5"),
        (lambda: RunOptions(forward_reasoning=1), TypeError, "forward_reasoning=1"),
        (lambda: RunOptions(forward_reasoning=None), TypeError, "forward_reasoning=None"),
        (lambda: RunOptions(deps_factory="app.deps"), TypeError, "deps_factory='app.deps'"),
        (lambda: RunOptions(on_disconnect="stop"), ValueError, "on_disconnect='stop'"),
        (lambda: RunOptions(concurrent_runs="queue"), ValueError, "concurrent_runs='queue'"),
        (lambda: RunOptions(run_lease_seconds=1.5), ValueError, "run_lease_seconds=1.5 must"),
        (lambda: RunOptions(interrupt_wait_seconds=0), ValueError, "interrupt_wait_seconds=0"),
        (lambda: RunOptions(on_worker_loss="retry"), ValueError, "on_worker_loss='retry'"),
        (lambda: RunOptions(max_resumes=-1), ValueError, "max_resumes=-1 is negative"),
        (lambda: RunOptions(max_resumes=1.5), TypeError, "max_resumes=1.5 is not a whole"),
        (
            lambda: RunOptions(allowed_file_url_schemes="https"),
            TypeError,
            "allowed_file_url_schemes='https'",
        ),
        (lambda: AttachmentOptions(max_bytes=-5), ValueError, "max_bytes=-5"),
        (lambda: AttachmentOptions(allowed_types="image/png"), TypeError, "is a string"),
        (lambda: MountOptions(namespace="a:b"), ValueError, "namespace='a:b'"),
        (lambda: MountOptions(namespace=""), ValueError, "namespace=''"),
        (lambda: MountOptions(thread_list_limit=0), ValueError, "thread_list_limit=0"),
        (lambda: MountOptions(thread_list_limit=True), TypeError, "thread_list_limit=True"),
        (lambda: MountOptions(max_body_bytes=0), ValueError, "max_body_bytes=0"),
        (lambda: MountOptions(max_body_bytes="1MB"), TypeError, "max_body_bytes='1MB'"),
        (lambda: AccessPolicy(authorize="app.allowed"), TypeError, "authorize='app.allowed' is"),
        (lambda: AccessPolicy(get_user="app.get_user"), TypeError, "get_user='app.get_user'"),
        (lambda: AccessPolicy(throttle=5), TypeError, "throttle=5 is not callable"),
        (lambda: AccessPolicy(require_authenticated="yes"), TypeError, "require_authenticated="),
        (lambda: AccessPolicy(csrf_exempt="no"), TypeError, "csrf_exempt='no' must be True"),
    ],
)
def test_an_options_object_refuses_a_bad_value_at_construction_naming_it(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(")):
        build()


def test_options_normalise_what_they_keep() -> None:
    options = RunOptions(heartbeat_seconds=3, allowed_file_url_schemes=("HTTPS",))
    assert options.heartbeat_seconds == 3.0
    assert isinstance(options.heartbeat_seconds, float)
    assert options.allowed_file_url_schemes == frozenset({"https"})
    assert AttachmentOptions(allowed_types=["Image/PNG"]).allowed_types == ("image/png",)
    assert MountOptions(max_body_bytes=4096).body_limit() == 4096
    assert MountOptions(max_body_bytes=4096.0).max_body_bytes == 4096


def test_an_unstated_csrf_choice_warns_at_the_caller_and_means_exempt() -> None:
    with pytest.warns(UnsafeCSRFExemptionWarning) as caught:
        server = AGUIServer(text_agent())
    assert caught[0].filename == __file__  # the line constructing the server
    assert server.access.csrf_exempt is True
    assert csrf_exemption(None, header_auth=True) is True
    assert csrf_exemption(False, header_auth=False) is False


@pytest.mark.parametrize("persisting", [False, True], ids=["stateless", "durable"])
def test_one_route_table_drives_the_views_and_the_urlpatterns(persisting: bool) -> None:
    stores: dict[str, Any] = {}
    if persisting:
        stores = {
            "conversation_store": DefaultConversationStore(),
            "attachment_store": DefaultAttachmentStore(),
        }
    server = AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True), **stores)
    for pattern in server.urlpatterns:
        view = getattr(server, f"{pattern.name.replace('-', '_')}_view")
        assert pattern.callback is view
        assert isinstance(view, AGUIView)
    # The thread and attachment views exist unmounted for a Null store; the run routes do not.
    assert isinstance(server.thread_view, AGUIView)
    assert isinstance(server.attachments_view, AGUIView)
    assert hasattr(server, "run_cancel_view") is persisting
    assert server.attachments_view.agui_upload_max_bytes == server.attachments.max_bytes


@pytest.fixture
def adapters_built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every adapter built, by either path (the intake's and the inner agent's)."""
    built: list[object] = []
    real = inner.build_adapter

    def counting(*args: Any, **kwargs: Any) -> Any:
        adapter = real(*args, **kwargs)
        built.append(adapter)
        return adapter

    monkeypatch.setattr(inner, "build_adapter", counting)
    monkeypatch.setattr(run, "build_adapter", counting)
    return built


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.urls")
@pytest.mark.parametrize("mount", ["/agent/", "/stored/"], ids=["stateless", "durable"])
async def test_the_adapter_is_built_once_per_run(
    mount: str, alice: Any, adapters_built: list[object]
) -> None:
    async with await logged_in(alice) as http:
        response = await http.post(mount, json=run_body())
    assert response.status_code == 200
    assert event_types(response.text)[-1] == "RUN_FINISHED"
    assert len(adapters_built) == 1


def _posted(*messages: dict[str, Any]) -> Any:
    from ag_ui.core import RunAgentInput

    return RunAgentInput.model_validate({**run_body(), "messages": list(messages)})


def test_a_durable_run_converts_only_what_it_may_take_of_the_posted_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stored history is what a durable run sends the model, so of a posted transcript only
    what it may store is converted up front: a client that posts only its newest messages,
    cut inside a tool exchange, is not refused for a result whose call it left out."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    echoed = [
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "5"},
        {"id": "a2", "role": "assistant", "content": "It is 5."},
        {"id": "u3", "role": "user", "content": "And then?"},
    ]
    inner.check_convertible(_posted(*echoed))
    # What it may take is still converted: a result after the last answer, and a user message
    # with content parts wherever it is.
    orphan = {"id": "t2", "role": "tool", "toolCallId": "c9", "content": "?"}
    with pytest.raises(ValueError, match="c9"):
        inner.check_convertible(_posted(*echoed[:2], orphan))
    seen: list[list[str]] = []
    real = inner.RedactingAGUIAdapter.load_messages.__func__  # type: ignore[attr-defined]

    def spy(cls: Any, messages: Any, **options: Any) -> Any:
        seen.append([m.id for m in messages])
        return real(cls, messages, **options)

    monkeypatch.setattr(inner.RedactingAGUIAdapter, "load_messages", classmethod(spy))
    parts = [{"type": "text", "text": "Look:"}]
    older = [
        {"id": "u0", "role": "user", "content": parts},
        {"id": "u1", "role": "user", "content": "What is 2 + 3?"},
        {"id": "a1", "role": "assistant", "content": "", "toolCalls": [call]},
    ]
    inner.check_convertible(_posted(*older, *echoed))
    assert seen == [["u0", "a2", "u3"]]
    # A result after the last answer, for a call an older message made, converts with it (the
    # storage agent then refuses it as a second result, in a RUN_ERROR).
    again = {"id": "t3", "role": "tool", "toolCallId": "c1", "content": "6"}
    inner.check_convertible(_posted(*older, *echoed, again))
    assert seen[-1] == ["u0", "a1", "t1", "a2", "u3", "t3"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.urls")
async def test_a_durable_run_still_refuses_an_unconvertible_history_before_streaming(
    alice: Any, adapters_built: list[object]
) -> None:
    body = run_body()
    body["messages"].append({"id": "t1", "role": "tool", "toolCallId": "nope", "content": "5"})
    body["messages"].append({"id": "u2", "role": "user", "content": "And then?"})
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=body)
    assert response.status_code == 400
    assert "toolCallId answers no tool call" in response.json()["error"]
    assert adapters_built == []
