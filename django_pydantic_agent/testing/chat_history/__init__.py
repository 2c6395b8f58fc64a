"""The chat-history contract suite: the spec's scenarios against any pair of repositories.

Like Django's ``BaseCacheTests``: subclass :class:`ChatHistoryContract` in a ``test_*.py``
module, name the subclass ``Test...`` and override the ``open_repositories`` fixture to return
a callable that builds a *new* ``(chat_repository, message_repository)`` pair over the same
backing storage each time it is called::

    class TestMyRepositories(ChatHistoryContract):
        @pytest.fixture
        def open_repositories(self, my_database):
            return lambda: (MyChatRepository(my_database), MyMessageRepository(my_database))

Every scenario writes through one pair and reads back through a fresh one, so a backend whose
reads depend on a warm in-process cache fails here, as a second worker would. Scenarios drive
the real :class:`~django_pydantic_agent.chat_history.AGUIStorageAgent` under a
:class:`~django_pydantic_agent.chat_history.StreamPersistenceManager`, with scripted inner
agents (:mod:`django_pydantic_agent.testing.agui_script`), and call the repositories directly;
they are numbered after ``S1``-``S42`` of the chat-history spec and assert its TARGET
behaviour where the spec has one.

Needs pytest and pytest-asyncio (``asyncio_mode=auto`` or the class's ``asyncio`` mark); a
backend over the Django ORM or the Memory Service emulator adds its own ``django_db`` mark.
Override ``make_storage_agent`` to run the scenarios through your ``AGUIStorageAgent``
subclass.
"""

from __future__ import annotations

from django_pydantic_agent.testing.chat_history._harness import (
    OTHER_USER,
    USER,
    ChatHistoryHarness,
    OpenRepositories,
    Played,
    RepositoryPair,
)
from django_pydantic_agent.testing.chat_history.repositories import RepositoryScenarios
from django_pydantic_agent.testing.chat_history.runs import RunScenarios
from django_pydantic_agent.testing.chat_history.streams import StreamScenarios

__all__ = [
    "OTHER_USER",
    "USER",
    "ChatHistoryContract",
    "ChatHistoryHarness",
    "OpenRepositories",
    "Played",
    "RepositoryPair",
    "RepositoryScenarios",
    "RunScenarios",
    "StreamScenarios",
]


class ChatHistoryContract(StreamScenarios, RunScenarios, RepositoryScenarios):
    """The whole chat-history contract. Override the ``open_repositories`` fixture.

    The scenario groups are also usable alone (``RepositoryScenarios`` needs no storage
    agent). Class flags, inherited from ``ChatHistoryHarness``:

    - ``max_content_chars``: the longest text one record can hold (``None``: unbounded). The
      Memory Service refuses event content over 100 000 characters; an unbounded backend must
      store a 150 000-character answer exactly, a bounded one must never duplicate text.
    """
