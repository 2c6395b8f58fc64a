"""SSE frames as a browser's ``EventSource`` reads them: ``id:`` and ``data:`` lines."""

from __future__ import annotations

import json

import pytest
from ag_ui.core import RunStartedEvent, TextMessageContentEvent

from django_pydantic_agent.agui.sse import aclose, encode_event


def test_a_frame_is_one_data_line_and_a_blank_line() -> None:
    frame = encode_event(RunStartedEvent(thread_id="t1", run_id="r1"))
    assert frame.endswith("\n\n")
    [line] = frame.strip("\n").split("\n")
    assert json.loads(line.removeprefix("data: ")) == {
        "type": "RUN_STARTED",
        "threadId": "t1",
        "runId": "r1",
    }


def test_an_event_id_is_written_first_for_last_event_id() -> None:
    frame = encode_event(TextMessageContentEvent(message_id="m", delta="hi"), event_id="r1:7")
    id_line, data_line = frame.strip("\n").split("\n")
    assert id_line == "id: r1:7"
    assert json.loads(data_line.removeprefix("data: "))["delta"] == "hi"


@pytest.mark.parametrize("event_id", ["r1\n7", "r1\r7", "r1\x007"])
def test_an_event_id_that_would_break_the_frame_is_refused(event_id: str) -> None:
    with pytest.raises(ValueError, match="CR, LF or NUL"):
        encode_event(RunStartedEvent(thread_id="t", run_id="r"), event_id=event_id)


async def test_aclose_accepts_an_iterator_without_aclose() -> None:
    class Plain:
        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> str:
            raise StopAsyncIteration

    await aclose(Plain())  # nothing to close, and no error
