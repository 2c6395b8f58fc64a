"""Store a thread for a user of the example project through its own stores, as a script.

Run with the example's environment from ``example_project/`` (``test_chat_page.py``)::

    python ../tests/e2e/store_thread.py <username> hostile|long|markdown <thread-id> [messages]

``hostile`` saves a short thread whose user text, assistant text, tool name, tool arguments,
tool result and title carry script payloads; ``long`` saves ``messages`` alternating user and
assistant messages in markdown; ``markdown`` saves a question and an answer written in markdown,
so the thread's title and preview (which the store derives from them) are markdown too. The
thread goes through ``build_stores()`` (``AGENT_STORE``), so it lands where the running server
reads it, on either store.
"""

from __future__ import annotations

import asyncio
import sys

import django

PAYLOAD = (
    "<img src=x onerror=\"window.__owned='{where}'\"><script>window.__owned='{where}'</script>"
)


def hostile_messages() -> list[dict[str, object]]:
    """A user message, a tool call and its result, and an answer, each carrying a payload."""
    return [
        {"id": "h-user", "role": "user", "content": PAYLOAD.format(where="user")},
        {
            "id": "h-call",
            "role": "assistant",
            "content": "",
            "toolCalls": [
                {
                    "id": "call-hostile",
                    "type": "function",
                    "function": {
                        "name": PAYLOAD.format(where="tool-name"),
                        "arguments": '{"expression": "'
                        + PAYLOAD.format(where="tool-args").replace('"', '\\"')
                        + '"}',
                    },
                }
            ],
        },
        {
            "id": "h-result",
            "role": "tool",
            "toolCallId": "call-hostile",
            "content": PAYLOAD.format(where="tool-result"),
        },
        {
            "id": "h-answer",
            "role": "assistant",
            "content": PAYLOAD.format(where="answer") + " [link](javascript:window.__owned='link')",
        },
    ]


def long_messages(count: int) -> list[dict[str, object]]:
    """``count`` messages, user and assistant in turn, the answers in markdown."""
    messages: list[dict[str, object]] = []
    for index in range(count):
        if index % 2 == 0:
            messages.append({"id": f"m{index}", "role": "user", "content": f"Question {index}?"})
        else:
            messages.append(
                {
                    "id": f"m{index}",
                    "role": "assistant",
                    "content": f"Answer **{index}**:\n\n- one\n- two\n\n`code {index}`",
                }
            )
    return messages


#: The ``markdown`` thread: a heading and bold in the question (its title), bold, code and a
#: link in the answer (its preview).
MARKDOWN_MESSAGES: list[dict[str, object]] = [
    {"id": "md-user", "role": "user", "content": "## What does **notes.txt** say?"},
    {
        "id": "md-answer",
        "role": "assistant",
        "content": "**notes.txt** lists `three` items: see [the file](https://example.com/n).",
    },
]


async def store(username: str, kind: str, thread_id: str, count: int) -> None:
    from chat.stores import build_stores
    from django.contrib.auth.models import User
    from django.http import HttpRequest

    from django_pydantic_agent.persistence.base import Conversation

    conversations, _ = build_stores()
    request = HttpRequest()
    request.user = await User.objects.aget(username=username)
    if kind == "markdown":
        messages = MARKDOWN_MESSAGES
    else:
        messages = hostile_messages() if kind == "hostile" else long_messages(count)
    await conversations.save(Conversation(thread_id, messages), request=request)
    if kind == "hostile":
        await conversations.rename(thread_id, PAYLOAD.format(where="title"), request=request)


if __name__ == "__main__":
    sys.path.insert(0, ".")  # example_project/, for its settings and the chat app
    django.setup()
    name, what, thread = sys.argv[1:4]
    asyncio.run(store(name, what, thread, int(sys.argv[4]) if len(sys.argv) > 4 else 1000))
