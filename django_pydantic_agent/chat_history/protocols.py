"""``implements``: whether an object offers a ``typing.Protocol``'s members, delegation included.

``isinstance(obj, SomeRuntimeCheckableProtocol)`` looks members up with
``inspect.getattr_static`` from Python 3.12 on, so a wrapper that forwards to an inner object
through ``__getattr__`` (a logging or metrics proxy around a store) fails it there while it
passes on 3.11. Every contract and capability of this package is read through ``implements``
instead: a member counts when ordinary attribute access finds it, and a method member must
not be ``None`` (3.11's rule), on every supported Python alike.
"""

from __future__ import annotations

import functools
import typing
from typing import Any, TypeVar

from typing_extensions import TypeIs

__all__ = ["implements", "missing_members", "protocol_members"]

_T = TypeVar("_T")


@functools.cache
def protocol_members(protocol: Any) -> tuple[tuple[str, bool], ...]:
    """``(name, is_method)`` for every member ``protocol`` declares, sorted by name.

    Raises ``TypeError`` for a class that is not a ``typing.Protocol``.
    """
    if not getattr(protocol, "_is_protocol", False):
        raise TypeError(f"{protocol!r} is not a typing.Protocol; pass a Protocol class.")
    names: Any = getattr(protocol, "__protocol_attrs__", None)
    if names is None:  # Python 3.11 computes them on demand
        names = typing._get_protocol_attrs(protocol)  # type: ignore[attr-defined]
    return tuple(sorted((name, callable(getattr(protocol, name, None))) for name in names))


def implements(obj: object, protocol: type[_T]) -> TypeIs[_T]:
    """Whether ``obj`` has every member of ``protocol``, as attribute access finds them.

    Unlike ``isinstance`` on 3.12 and later, a member an object provides through
    ``__getattr__`` counts. Reading a property member evaluates it, as ``hasattr`` does.
    """
    members: tuple[tuple[str, bool], ...] = protocol_members(protocol)  # type: ignore[arg-type]
    for name, is_method in members:
        try:
            value = getattr(obj, name)
        except AttributeError:
            return False
        if is_method and value is None:
            return False
    return True


def missing_members(obj: object, protocol: Any) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks, by ``implements``'s rule, sorted."""
    missing = []
    for name, is_method in protocol_members(protocol):
        try:
            value = getattr(obj, name)
        except AttributeError:
            missing.append(name)
            continue
        if is_method and value is None:
            missing.append(name)
    return missing
