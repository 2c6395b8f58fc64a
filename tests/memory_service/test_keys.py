"""Markers, the description encoding and value serialisation (pure functions, no I/O)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from django_pydantic_agent.memory_service import (
    DEFAULT_SESSION_TTL_SECONDS,
    SYSTEM_PARTICIPANT,
    DRConcurrencyField,
    DRDeduplicationKey,
    DRRangeKey,
    DRSession,
)
from django_pydantic_agent.memory_service import __all__ as public_names
from django_pydantic_agent.memory_service._serde import dump_value, load_value
from django_pydantic_agent.memory_service.keys import decode_description, encode_description

SEED_NAMES = {
    "DRMemorySpace",
    "DRSession",
    "DREvent",
    "DRDeduplicationKey",
    "DRRangeKey",
    "DRConcurrencyField",
    "DRMemoryServiceClient",
    "SYSTEM_PARTICIPANT",
    "DEFAULT_SESSION_TTL_SECONDS",
    "DRMemoryServiceError",
    "DRMemoryNotFoundError",
    "DRMemoryBadRequestError",
    "DRMemoryValidationError",
    "DRMemoryConflictError",
    "DRMemoryVersionConflictError",
    "DRMemoryRateLimitError",
    "DRMemoryUnavailableError",
}


def test_public_names_and_constants() -> None:
    assert set(public_names) == SEED_NAMES
    assert SYSTEM_PARTICIPANT == "0" * 24
    assert DEFAULT_SESSION_TTL_SECONDS == 2 * 365 * 86400


@pytest.mark.parametrize(
    ("prefix", "segments", "encoded"),
    [
        ("chat", [], "//chat/"),
        ("chat", ["acme", "billing"], "//chat/acme/billing/"),
        ("chat", ["a/b%_c", "t"], "//chat/a%2Fb%25_c/t/"),
        ("p/x", ["%2F"], "//p%2Fx/%252F/"),
        ("chat", ["ünï code", " "], "//chat/ünï code/ /"),
    ],
)
def test_description_round_trip(prefix: str, segments: list[str], encoded: str) -> None:
    assert encode_description(prefix, segments) == encoded
    assert decode_description(prefix, encoded, len(segments)) == segments


@pytest.mark.parametrize(
    ("stored", "count", "expected"),
    [
        (None, 1, None),
        ("//loc/", 1, None),  # another prefix
        ("//chatx/a/", 1, None),  # a longer prefix is not this one
        ("//chat/a/", 2, None),  # too few segments
        ("//chat/a/b/c/", 2, ["a", "b"]),  # extra segments ignored
        ("//chat/a/b", 2, None),  # the last segment is not terminated
        ("plain text", 0, None),
    ],
)
def test_decode_tolerates_foreign_descriptions(
    stored: str | None, count: int, expected: list[str] | None
) -> None:
    assert decode_description("chat", stored, count) == expected


def test_encoded_description_is_capped() -> None:
    assert len(encode_description("p", ["x" * 995])) == 1000
    with pytest.raises(ValueError, match="1001 characters long"):
        encode_description("p", ["x" * 996])
    with pytest.raises(ValueError, match="description filter"):
        encode_description("p", ["x" * 996], complete=False)


def test_marker_rules_at_class_creation() -> None:
    with pytest.raises(TypeError, match="two DRConcurrencyField fields \\('a' and 'b'\\)"):

        class TwoVersions(DRSession):
            a: Annotated[int, DRConcurrencyField]
            b: Annotated[int, DRConcurrencyField()]

    with pytest.raises(TypeError, match="two DRDeduplicationKey"):

        class TwoKeys(DRSession):
            a: Annotated[str, DRDeduplicationKey()]
            b: Annotated[str, DRDeduplicationKey]

    with pytest.raises(TypeError, match="several markers \\(DRRangeKey, DRConcurrencyField\\)"):

        class Mixed(DRSession):
            a: Annotated[int, DRRangeKey, DRConcurrencyField]

    with pytest.raises(TypeError, match="reserved by DRSession"):

        class Reserved(DRSession):
            participants: list[str] = []


def test_routing_of_an_incomplete_class_is_built_on_first_use() -> None:
    class Later(DRSession):
        k: Annotated[str, DRRangeKey]
        ref: Undefined

    class Undefined(BaseModel):
        pass

    Later.model_rebuild(_types_namespace={"Undefined": Undefined})
    assert Later._routing().range_keys == ("k",)
    assert Later._routing().metadata == ("ref",)


def _field(annotation: Any) -> FieldInfo:
    return FieldInfo.from_annotation(annotation)


def test_dump_falls_back_to_the_raw_value() -> None:
    marker = object()
    assert dump_value(_field(Any), marker) is marker
    assert dump_value(_field(float), 1) == 1.0


def test_load_keeps_invalid_values_raw(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.memory_service"):
        assert load_value("M", "n", _field(int), "x") == "x"
    assert "M.n holds 'x'" in caplog.text
