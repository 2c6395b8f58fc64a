"""One ``AGUIServer`` per agent under test, each with the AI SDK transport beside its routes:
``<prefix>/agent/`` (AG-UI) and ``<prefix>/api/chat`` (the AI SDK).

``s``       the scripted agent: reasoning, ``add(2, 3)``, an answer
``a``       ``send_email`` needs approval
``g``       the gated agent: "Working ", then waits for ``GATE``, then "done."
``c``       calls the page's ``get_location`` tool (declared in the body's ``tools``)
``cg``      the same, waiting for ``GATE`` once the page answered
``hasty``   gated, hands its runs over 0.2 s into a drain; ``patient`` takes them over
``csrf``    CSRF enforced (session cookies)
``quota``   one thread per user
``busy``    a throttle that always refuses
``anon``    anonymous visitors welcome (their session owns their threads)
``tiny``    a body cap of 2,000 bytes
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from django_pydantic_agent.agui import AccessPolicy, MountOptions, RunOptions
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.vercel_ai import VercelAITransport
from tests.agui.agents import GATE, approval_agent, gated_agent, scripted_agent
from tests.agui.urls import stored


def client_tool_agent(*, gated: bool = False) -> Agent[None, str]:
    """Call the page's ``get_location`` tool, then answer with what it returned (``gated``:
    after "You are ", wait for ``GATE.released``)."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        last = messages[-1]
        returns = [p for p in getattr(last, "parts", ()) if isinstance(p, ToolReturnPart)]
        if isinstance(last, ModelRequest) and returns:
            yield "You are "
            if gated:
                GATE.reached.set()
                await asyncio.wait_for(GATE.released.wait(), timeout=10)
            yield f"in {returns[0].model_response_str()}."
            return
        yield {0: DeltaToolCall(name="get_location", json_args="{}", tool_call_id="call-loc")}

    return Agent(FunctionModel(stream_function=stream))


def mounted(prefix: str, server: Any) -> list[Any]:
    """``server`` at ``<prefix>/agent/`` and its AI SDK routes at ``<prefix>/api/chat``."""
    transport = VercelAITransport(server, namespace=f"{server.mount.namespace}-chat")
    return [path(f"{prefix}/agent/", server.urls), path(f"{prefix}/api/chat", transport.urls)]


scripted = stored(scripted_agent(), mount=MountOptions(namespace="v-scripted"))
approval = stored(approval_agent(), mount=MountOptions(namespace="v-approval"))
gated = stored(gated_agent(), mount=MountOptions(namespace="v-gated"))
client_tools = stored(client_tool_agent(), mount=MountOptions(namespace="v-client"))
client_tools_gated = stored(
    client_tool_agent(gated=True), mount=MountOptions(namespace="v-client-gated")
)
hasty = stored(
    gated_agent(),
    mount=MountOptions(namespace="v-hasty"),
    runs=RunOptions(drain_seconds=0.2, sweep_interval_seconds=0),
)
patient = stored(
    gated_agent(),
    mount=MountOptions(namespace="v-patient"),
    runs=RunOptions(sweep_interval_seconds=0),
)
csrf = stored(
    scripted_agent(),
    mount=MountOptions(namespace="v-csrf"),
    access=AccessPolicy(csrf_exempt=False),
)
quota = stored(
    scripted_agent(),
    mount=MountOptions(namespace="v-quota"),
    conversation_store=DefaultConversationStore(max_threads_per_owner=1),
)
throttled = stored(
    scripted_agent(),
    mount=MountOptions(namespace="v-throttled"),
    access=AccessPolicy(csrf_exempt=True, throttle=lambda request: 3),
)
anonymous = stored(
    gated_agent(),
    mount=MountOptions(namespace="v-anon"),
    access=AccessPolicy(csrf_exempt=True, require_authenticated=False),
    conversation_store=DefaultConversationStore(allow_anonymous=True),
)
tiny = stored(scripted_agent(), mount=MountOptions(namespace="v-tiny", max_body_bytes=2000))

urlpatterns = [
    *mounted("s", scripted),
    *mounted("a", approval),
    *mounted("g", gated),
    *mounted("c", client_tools),
    *mounted("cg", client_tools_gated),
    *mounted("hasty", hasty),
    *mounted("patient", patient),
    *mounted("csrf", csrf),
    *mounted("quota", quota),
    *mounted("busy", throttled),
    *mounted("anon", anonymous),
    *mounted("tiny", tiny),
]
