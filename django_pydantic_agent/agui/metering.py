"""What a run used, as far as it got: the provider's figures, or an estimate marked as one.

A run that completes puts pydantic-ai's usage on ``RUN_FINISHED``. A run that is stopped or
fails never gets that result, though its provider billed the requests it sent. ``UsageMeter``
follows one run: pydantic-ai adds each model response to the meter's ``run_usage`` (passed to
the run as its ``usage``), one cut short by a cancel or a failure too, with whatever usage its
provider had reported by then (often none: many report usage only at the end of a stream).
The meter sees the run's events, so it knows what each request streamed. Once the run has
ended, however it ended, ``reached()`` is its usage in the run record's shape
(``{"tokens": [TokenUsage, ...]}``):

- the requests before the last one, as the provider reported them;
- the last request (the one the end cut short, if it had begun), each figure the larger of
  what its provider reported and an estimate: its input as the previous request's input and
  output (the history the run was sent, for its first request), its output as the text,
  reasoning and tool arguments it streamed. When an estimate was larger, its entry says
  ``"estimated": true``.

Estimates use ``pydantic_ai_harness.compaction.estimate_message_tokens`` when the ``harness``
extra is installed, else four characters a token, as the history window does
(``chat_history.window``; ``persistence.usage.estimate_text_tokens``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage

from django_pydantic_agent.persistence.usage import ESTIMATED_KEY, estimate_text_tokens

if TYPE_CHECKING:
    from ag_ui.core import BaseEvent
    from pydantic_ai.messages import ModelMessage

__all__ = ["MetersUsage", "UsageMeter", "model_names"]

_CHARS_PER_TOKEN: Final = 4
#: ``(requests, input tokens, output tokens)`` of a ``RunUsage``.
_Counts = tuple[int, int, int]


def _counts(usage: RunUsage) -> _Counts:
    return usage.requests, usage.input_tokens, usage.output_tokens


def _closes(kind: str) -> bool:
    """Whether an event of type ``kind`` ends something (a part, or the run)."""
    return kind.endswith(("_END", "RUN_ERROR", "RUN_FINISHED"))


@runtime_checkable
class MetersUsage(Protocol):
    """An agent that can say what its run used so far (``PydanticAIAgent`` does)."""

    def usage_reached(self) -> dict[str, Any]:
        """The run's usage as far as it got, in the run record's shape (``UsageMeter``)."""
        ...


def _estimate_messages(messages: Sequence[ModelMessage]) -> int:
    try:
        from pydantic_ai_harness.compaction import estimate_message_tokens
    except ImportError:
        return _fallback(messages)
    return sum(estimate_message_tokens(messages))


def _fallback(messages: Sequence[ModelMessage]) -> int:
    """Four characters a token over the texts, tool arguments and results of ``messages``."""
    chars = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                chars += len(content)
            elif content is not None:
                chars += len(str(content))
            args = getattr(part, "args", None)
            if args is not None:
                chars += len(args if isinstance(args, str) else str(args))
    return chars // _CHARS_PER_TOKEN


def model_names(agent: Any) -> tuple[str, str]:
    """``(model, provider)`` of a pydantic-ai agent's model, without building one: a ``Model``'s
    name and system, the two halves of ``"provider:model"``, else empty strings."""
    model = getattr(agent, "model", None)
    if isinstance(model, Model):
        return model.model_name, model.system
    if isinstance(model, str):
        provider, _, name = model.rpartition(":")
        return name, provider
    return "", ""


class UsageMeter:
    """One run's usage as it goes (see the module docstring).

    ``run_usage`` is handed to the pydantic-ai run; ``observe`` sees each of its events (the
    reasoning a mount withholds too); ``history`` is set once the run's model history is known
    (the input of its first request).
    """

    def __init__(self, *, model: str = "", provider: str = "") -> None:
        self.run_usage = RunUsage()
        self.model = model
        self.provider = provider
        self.history: Callable[[], Sequence[ModelMessage]] | None = None
        self._asked = False  # the model was asked (its run started streaming)
        self._base: _Counts = (0, 0, 0)  # the usage before the request in flight
        self._previous: tuple[int, int] | None = None  # (input, output) of the last request
        self._streamed: list[str] = []  # what the request in flight streamed
        self._reached: tuple[tuple[int, ...], dict[str, Any]] | None = None  # the last answer

    def observe(self, event: BaseEvent) -> None:
        """Count ``event``: the text, reasoning or tool arguments it streams."""
        self._asked = True
        usage = self.run_usage
        # A response was added, and the run went on past it (a part ending, or the run's end,
        # may still belong to that response): the next request begins.
        if usage.requests != self._base[0] and not _closes(event.type):
            now = _counts(usage)
            self._previous = (now[1] - self._base[1], now[2] - self._base[2])
            self._base = now
            self._streamed.clear()
        delta = getattr(event, "delta", None)
        if isinstance(delta, str) and delta:
            self._streamed.append(delta)

    def reached(self) -> dict[str, Any]:
        """The usage so far: the requests before the last as reported, and the last one (if it
        had begun) each figure at least its estimate. Asked again with nothing new counted, it
        answers the same without estimating again."""
        now = _counts(self.run_usage)
        key = (int(self._asked), *now, *self._base, len(self._streamed))
        if self._reached is not None and self._reached[0] == key:
            return self._reached[1]
        added = now[0] != self._base[0]
        # The last request had begun: it streamed, or a response was added for it (one stopped
        # before its first token), or the model was asked and nothing came back at all.
        cut = self._asked and (bool(self._streamed) or added or not now[0])
        entries: list[dict[str, Any]] = []
        if cut:
            base, reported = self._base, (now[1] - self._base[1], now[2] - self._base[2])
            estimate = self._estimate()
            last = (max(reported[0], estimate[0]), max(reported[1], estimate[1]))
            if last != reported:  # an estimate is larger than what the provider reported
                if base[0] or base[1] or base[2]:
                    entries.append(self._entry(base[1], base[2]))
                entries.append({**self._entry(*last), ESTIMATED_KEY: True})
        if not entries and (now[0] or now[1] or now[2]):
            entries.append(self._entry(now[1], now[2], usage=self.run_usage))
        reached = {"tokens": entries or [self._entry(0, 0)]}
        self._reached = (key, reached)
        return reached

    def _estimate(self) -> tuple[int, int]:
        """``(input, output)`` of the request in flight, estimated."""
        if self._previous is not None:
            input_tokens = sum(self._previous)
        else:
            history = self.history() if self.history is not None else ()
            input_tokens = _estimate_messages(history) if history else 0
        return input_tokens, estimate_text_tokens("".join(self._streamed))

    def _entry(
        self, input_tokens: int, output_tokens: int, *, usage: RunUsage | None = None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
        if usage is not None:
            extra = {
                "reasoning_tokens": usage.output_reasoning_tokens,
                "cached_input_tokens": usage.cache_read_tokens,
                "cache_write_input_tokens": usage.cache_write_tokens,
            }
            entry.update({key: value for key, value in extra.items() if value})
        return entry
