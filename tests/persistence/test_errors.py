"""One exception tree for the persistence boundary, importable from its old homes too."""

from __future__ import annotations

import pytest

import django_pydantic_agent
from django_pydantic_agent.persistence import errors


def test_every_store_error_is_a_store_error_with_its_extra_base() -> None:
    assert issubclass(errors.StoreError, Exception)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.StoreError), name
    assert issubclass(errors.UnstorableMessageError, ValueError)
    assert issubclass(errors.PersistenceDisabledError, NotImplementedError)


def test_the_docstring_draws_every_class_of_the_tree() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert f" {name} " in doc, f"{name} is missing from the tree in the docstring"


def test_unstorable_message_error_keeps_the_index() -> None:
    exc = errors.UnstorableMessageError("message 3 holds a NUL character", index=3)
    assert exc.index == 3
    assert str(exc) == "message 3 holds a NUL character"
    with pytest.raises(ValueError, match="NUL"):
        raise exc


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("django_pydantic_agent.persistence.base", "StoreError"),
        ("django_pydantic_agent.persistence.base", "StoreLimitError"),
        ("django_pydantic_agent.persistence.base", "StoreDataError"),
        ("django_pydantic_agent.persistence.owner", "AnonymousOperationError"),
        ("django_pydantic_agent.persistence.null", "PersistenceDisabledError"),
        ("django_pydantic_agent.contrib.store.stores", "UnstorableMessageError"),
        ("django_pydantic_agent.persistence", "UnstorableMessageError"),
    ],
)
def test_old_import_paths_give_the_same_class(module: str, name: str) -> None:
    old_home = __import__(module, fromlist=[name])
    assert getattr(old_home, name) is getattr(errors, name)
    if name in django_pydantic_agent.__all__:
        assert getattr(django_pydantic_agent, name) is getattr(errors, name)
