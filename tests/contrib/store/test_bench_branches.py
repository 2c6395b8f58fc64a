"""``bench/branches.py`` at a toy size: it runs, and its query counts do not grow."""

from __future__ import annotations

import pytest

from bench.branches import bench_branches
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage


@pytest.mark.django_db(transaction=True)
def test_fork_and_switch_cost_the_same_queries_at_any_size() -> None:
    small = {f.operation: f for f in bench_branches(messages=10, samples=2)}
    StoredMessage.objects.all().delete()
    StoredConversation.objects.all().delete()
    large = {f.operation: f for f in bench_branches(messages=60, samples=2)}

    assert set(small) == set(large)
    for operation in small:
        assert small[operation].queries == large[operation].queries, operation
    # Two forks of the 60 messages, next to the source and its two regenerated answers.
    assert StoredConversation.objects.count() == 3
    assert StoredMessage.objects.count() == 60 + 2 + 2 * 60
