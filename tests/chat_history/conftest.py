"""Fixtures for the chat-history tests: a fresh in-memory store per test."""

from __future__ import annotations

from uuid import UUID

import pytest

from django_pydantic_agent.chat_history import InMemoryChatRepository, InMemoryMessageRepository

USER = UUID("12345678-1234-5678-1234-567812345678")
OTHER_USER = UUID("87654321-4321-8765-4321-876543218765")


@pytest.fixture
def chat_repo() -> InMemoryChatRepository:
    return InMemoryChatRepository()


@pytest.fixture
def message_repo(chat_repo: InMemoryChatRepository) -> InMemoryMessageRepository:
    return InMemoryMessageRepository(chat_repo)
