"""Store many threads for a user of the example project at once, for the drawer's e2e test.

Run with the example's environment from ``example_project/`` (``test_chat_drawer.py``)::

    python ../tests/e2e/store_drawer.py <username> <prefix> <count>

Saves ``count`` threads ``<prefix>-00`` … (oldest first, so ``-00`` is the last of the
drawer), titled ``Trip NN``, each a question and an answer; ``<prefix>-07``'s question has the
word "quokka" in it (its title does not). Then ``<prefix>-hostile``, whose title (around the
word "zebrafish") and messages (around "narwhal") carry script payloads. Everything goes through
the example's own ``build_stores()`` (``AGENT_STORE``), so it lands where the running server
reads it.
"""

from __future__ import annotations

import asyncio
import sys

import django

PAYLOAD = (
    "<img src=x onerror=\"window.__owned='{where}'\"><script>window.__owned='{where}'</script>"
)


def messages(index: int) -> list[dict[str, object]]:
    """A question and its answer; thread 7 asks about a quokka."""
    animal = "a quokka" if index == 7 else "the harbour"
    return [
        {"id": f"q{index}", "role": "user", "content": f"Plan day {index}: what about {animal}?"},
        {"id": f"a{index}", "role": "assistant", "content": f"Day {index} is **planned**."},
    ]


async def store(username: str, prefix: str, count: int) -> None:
    from chat.stores import build_stores
    from django.contrib.auth.models import User
    from django.http import HttpRequest

    from django_pydantic_agent.persistence.base import Conversation

    conversations, _ = build_stores()
    request = HttpRequest()
    request.user = await User.objects.aget(username=username)
    for index in range(count):
        thread = f"{prefix}-{index:02d}"
        await conversations.save(Conversation(thread, messages(index)), request=request)
        await conversations.rename(thread, f"Trip {index:02d}", request=request)
    hostile = f"{prefix}-hostile"
    text = f"narwhal {PAYLOAD.format(where='snippet')} narwhal"
    await conversations.save(
        Conversation(
            hostile,
            [
                {"id": "h-user", "role": "user", "content": text},
                {"id": "h-answer", "role": "assistant", "content": text},
            ],
        ),
        request=request,
    )
    title = f"zebrafish {PAYLOAD.format(where='title')}"
    await conversations.rename(hostile, title, request=request)


if __name__ == "__main__":
    sys.path.insert(0, ".")  # example_project/, for its settings and the chat app
    django.setup()
    name, prefix, many = sys.argv[1:4]
    asyncio.run(store(name, prefix, int(many)))
