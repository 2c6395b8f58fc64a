"""Fixtures for the persistence tests."""

from __future__ import annotations

import pytest

from django_pydantic_agent.testing import StoreActors


@pytest.fixture
def actors(transactional_db: None) -> StoreActors:
    """Two users and two anonymous sessions, on a transactional database (stores use threads)."""
    return StoreActors.create()
