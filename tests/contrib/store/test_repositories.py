"""The ORM chat-history repositories: the public contract, owner scoping, deletes, query counts."""

from __future__ import annotations

from typing import ClassVar

import pytest

from django_pydantic_agent.contrib.store.repositories import (
    OrmChatRepository,
    OrmMessageRepository,
)
from django_pydantic_agent.testing.chat_history import ChatHistoryContract, OpenRepositories


class TestOrmRepositories(ChatHistoryContract):
    """Every fresh pair starts with cold caches, as on another worker."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [
        pytest.mark.asyncio,
        pytest.mark.django_db(transaction=True),
    ]

    @pytest.fixture
    def open_repositories(self) -> OpenRepositories:
        def open_pair() -> tuple[OrmChatRepository, OrmMessageRepository]:
            chats = OrmChatRepository()
            return chats, OrmMessageRepository(chats)

        return open_pair
