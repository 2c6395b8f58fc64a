"""The example project's agent: a scripted model by default, a real provider on request.

Without ``AGENT_MODEL`` the agent runs on a pydantic-ai ``FunctionModel`` whose stream function
plays a fixed script, so the demo needs no API key and never leaves the machine:

1. it streams a short reasoning block;
2. it calls real tools: ``read_attachment`` (the package's, ``agui.tools``) for each text file
   the message refers to, ``calculate`` when the message contains arithmetic, ``server_time``
   otherwise;
3. once the tools have answered, it streams the reply word by word, with a small pause between
   words so the streaming is visible in the browser.

The script learns which files were attached as a real model does: from the ``<attachments>``
fence the server appends to a user message that quotes uploads (``agui.attachment_fence``).
A message that attaches files, or that asks about "my file" after an earlier one did, gets
the files read: the answer gives each text file's size and quotes its first lines, and says
plainly that a binary file (an image, a PDF) is not something the demo reads.

Ask for a "long" answer to get a reply long enough to try the Stop button on. Ask it to
"remind me" of something and it calls ``set_reminder``, a tool that needs your approval first
(human in the loop: the run ends waiting, the next one carries the answer). Ask about "my
browser" from a page that declares a tool of its own (the AI SDK page of ``docs/vercel-ai.md``
declares ``browser_info``) and the script calls that tool: the page runs it and sends the
output back.

With ``AGENT_MODEL`` set (``openai:gpt-4o``, ``anthropic:claude-sonnet-4-5``, ...) the same tools
are given to that model; the provider reads its API key from the usual environment variable.
"""

from __future__ import annotations

import ast
import asyncio
import operator
import re
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingCalls,
    DeltaThinkingPart,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
)

from django_pydantic_agent.agui.attachment_fence import ATTACHMENTS_FENCE_OPEN, attachment_refs_in
from django_pydantic_agent.agui.tools import read_attachment

__all__ = [
    "INSTRUCTIONS",
    "REMINDERS",
    "build_agent",
    "calculate",
    "extract_expression",
    "scripted_model",
    "server_time",
    "set_reminder",
]

INSTRUCTIONS = (
    "You are the friendly demo assistant of django-pydantic-agent. Use the `calculate` tool for "
    "arithmetic and the `server_time` tool when asked about the time or date. When the user asks "
    "about a file they attached, read it with the `read_attachment` tool, passing an id from "
    "the message's <attachments> list. Use `set_reminder` when asked to remind the user of "
    "something; it waits for the user's approval. Keep answers short."
)

#: What ``set_reminder`` set, newest last (an approved call only ever runs once).
REMINDERS: list[str] = []

_MAX_EXPRESSION_LENGTH = 200
_MAX_EXPONENT = 100
_MAX_MAGNITUDE = 10**30

_BINARY_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPERATORS: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}

# A run of characters that can form arithmetic, with at least one digit in it.
_EXPRESSION_RE = re.compile(r"[\d\s.+\-*/%^()\u00d7\u00f7]*\d[\d\s.+\-*/%^()\u00d7\u00f7]*")
_OPERATOR_RE = re.compile(r"\d\s*(\*\*|[+\-*/%^\u00d7\u00f7])\s*[\d(.\-]")


def _evaluate(node: ast.AST) -> float:
    """Evaluate a parsed arithmetic node; anything but numbers and operators is refused."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPERATORS:
        return _UNARY_OPERATORS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError(f"the exponent {right!r} is larger than {_MAX_EXPONENT}")
        result = _BINARY_OPERATORS[type(node.op)](left, right)
        if abs(result) > _MAX_MAGNITUDE:
            raise ValueError("the result is too large to show")
        return result
    raise ValueError(f"{type(node).__name__} is not allowed; use numbers and + - * / // % **")


def _normalize(expression: str) -> str:
    """Map ``^`` and the multiplication and division signs to Python's operators."""
    return expression.replace("^", "**").replace("\u00d7", "*").replace("\u00f7", "/").strip()


async def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression such as ``(2 + 3) * 4`` and return the result.

    Only numbers, parentheses and the operators ``+ - * / // % **`` are accepted; the
    expression is parsed with :mod:`ast`, never passed to ``eval``.

    Args:
        expression: The arithmetic to evaluate.
    """
    source = _normalize(expression)
    if not source or len(source) > _MAX_EXPRESSION_LENGTH:
        raise ModelRetry(
            f"Send one arithmetic expression of at most {_MAX_EXPRESSION_LENGTH} characters."
        )
    try:
        value = _evaluate(ast.parse(source, mode="eval"))
    except ZeroDivisionError:
        raise ModelRetry(f"{expression!r} divides by zero.") from None
    except (SyntaxError, ValueError, OverflowError) as exc:
        raise ModelRetry(f"{expression!r} is not arithmetic the calculator accepts: {exc}") from exc
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:.10g}" if isinstance(value, float) else str(value)


async def server_time() -> str:
    """Return the server's current date and time in UTC (ISO 8601)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


async def set_reminder(text: str) -> str:
    """Set a reminder of ``text`` for the user. Runs only once the user approved it.

    Args:
        text: What to remind the user of.
    """
    REMINDERS.append(text)
    return f"Reminder set: {text}"


def extract_expression(text: str) -> str | None:
    """Return the arithmetic in ``text`` (``"what is 6 * 7?"`` gives ``"6 * 7"``), or ``None``."""
    candidates = [m.group().strip() for m in _EXPRESSION_RE.finditer(text)]
    candidates = [c for c in candidates if _OPERATOR_RE.search(c)]
    if not candidates:
        return None
    return max(candidates, key=len)


def _prompt_texts(part: UserPromptPart) -> list[str]:
    """The text items of a user prompt, the server's attachment fence among them."""
    if isinstance(part.content, str):
        return [part.content]
    return [item for item in part.content if isinstance(item, str)]


def _user_prompts(messages: list[ModelMessage]) -> list[UserPromptPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def _last_user_text(messages: list[ModelMessage]) -> str:
    """The text the user wrote in the most recent prompt ("" when there is none), without the
    attachment fence the server added."""
    prompts = _user_prompts(messages)
    if not prompts:
        return ""
    texts = _prompt_texts(prompts[-1])
    return " ".join(text for text in texts if not text.startswith(ATTACHMENTS_FENCE_OPEN))


def _attachment_refs(messages: list[ModelMessage]) -> tuple[list[dict[str, Any]], list[Any]]:
    """``(files the last prompt attached, files of the latest earlier prompt that attached
    any)``, as the server's fences list them."""
    fenced = [attachment_refs_in("\n".join(_prompt_texts(p))) for p in _user_prompts(messages)]
    if not fenced:
        return [], []
    earlier = [refs for refs in fenced[:-1] if refs]
    return fenced[-1], earlier[-1] if earlier else []


_FILE_WORDS_RE = re.compile(
    r"\b(files?|attach\w*|documents?|notes?|upload\w*|read|says?|contents?|contains?)\b",
    re.IGNORECASE,
)
_TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/csv")
_QUOTED_LINES = 3
_QUOTED_LINE_CHARS = 200


def _is_text(mime: str) -> bool:
    mime = mime.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _TEXT_TYPES


def _file_summary(ref: dict[str, Any], content: str) -> str:
    """What a text file says: its size, line count and first lines, quoted."""
    name = ref.get("name") or ref["id"]
    lines = content.splitlines()
    size = len(content.encode())
    if not lines:
        return f"**{name}** is empty ({size} bytes)."
    shown = [
        line if len(line) <= _QUOTED_LINE_CHARS else f"{line[:_QUOTED_LINE_CHARS]}\u2026"
        for line in lines[:_QUOTED_LINES]
    ]
    counted = "1 line" if len(lines) == 1 else f"{len(lines)} lines"
    quote = "\n".join(f"> {line}" if line.strip() else ">" for line in shown)
    more = len(lines) - len(shown)
    tail = f"\n\n\u2026and {more} more line{'s' if more != 1 else ''}." if more else ""
    return f"**{name}** ({size} bytes, {counted}) says:\n\n{quote}{tail}"


def _binary_summary(ref: dict[str, Any]) -> str:
    name = ref.get("name") or ref["id"]
    mime = ref.get("mime") or "application/octet-stream"
    return (
        f"I can't read **{name}**: its type is {mime}, and this demo reads text files only. "
        "Give the agent a real model (AGENT_MODEL) to have images and PDFs read."
    )


def _wants_long_answer(text: str) -> bool:
    return bool(re.search(r"\b(long|story|essay)\b", text, re.IGNORECASE))


def _format_time(iso: str) -> str:
    moment = datetime.fromisoformat(iso)
    return f"{moment:%H:%M:%S} UTC on {moment:%A %d %B %Y}"


_LONG_TAIL = (
    "Since you asked for a long answer, here is a short tour of what you are looking at. "
    "Every word on this page arrives as its own server-sent event, numbered within its run. "
    "The agent runs inside Django, in a task of the server rather than of your request; "
    "pydantic-ai turns what the model produces into AG-UI events, which the server stores and "
    "writes to the body of the page's POST request as they happen. "
    "The browser reads that body with fetch, splits it into frames at blank lines, skips the "
    "heartbeat comments the server sends during long silences, and hands each event to a small "
    "renderer. The reasoning block came first, then the tool call with its arguments and its "
    "result, and now this text, one small delta at a time. "
    "The conversation is the server's: whatever the page posts, the model sees the history the "
    "server has stored plus your new message, never a past that a browser made up. "
    "Press Stop whenever you like. The page asks the server to cancel this run, and the server "
    "stops the model, keeps what it had written and ends this stream itself, so no tokens are "
    "spent on an answer nobody reads. Closing the tab is not a Stop: the run goes on to its "
    "end, and a reload picks the stream up again where the page left it. "
    "Nothing here needs an API key: the model is a scripted FunctionModel that plays the same "
    "moves every time. Set AGENT_MODEL, with your provider's API key, to put a real model "
    "behind the same page, endpoint and tools. "
    "That is the whole trick: a Django view, an agent, and a protocol any AG-UI client speaks."
)


#: The answer to a question about markdown or a table: what contrib.chat's renderer shows.
_MARKDOWN_ANSWER = (
    "## What the page renders\n\n"
    "Answers are **markdown**: *emphasis*, `inline code`, lists and "
    "[links](https://github.com/pydantic/pydantic-ai) (http and https only).\n\n"
    "| Feature | Where |\n"
    "|:--------|------:|\n"
    "| Tables | here |\n"
    "| Code blocks | below |\n\n"
    "```python\n"
    "from django_pydantic_agent.contrib.chat.views import ChatView\n\n"
    'urlpatterns = [path("chat/", ChatView.as_view(server=server))]\n'
    "```\n\n"
    "- Raw HTML such as <b>this</b> stays text.\n"
    "- Each code block has a **Copy** button."
)


_REMIND_RE = re.compile(r"\bremind me (?:to |of |about )?(?P<what>.+?)[.!?]*$", re.IGNORECASE)
_BROWSER_RE = re.compile(r"\bbrowser\b", re.IGNORECASE)


def _reminder(text: str) -> str | None:
    """What ``text`` asks to be reminded of ("remind me to water the plants"), or ``None``."""
    match = _REMIND_RE.search(text.strip())
    return match.group("what").strip() if match else None


def _page_tool(info: AgentInfo | None, prompt: str) -> str | None:
    """The name of a tool the page declared (an external tool), when ``prompt`` asks about
    the browser; ``None`` otherwise."""
    if info is None or not _BROWSER_RE.search(prompt):
        return None
    declared = [tool.name for tool in info.function_tools if tool.kind == "external"]
    return declared[0] if declared else None


def _wants_markdown(text: str) -> bool:
    return bool(re.search(r"\b(markdown|table)\b", text, re.IGNORECASE))


class _Script:
    """The scripted model's behaviour, served streamed or in one piece."""

    def __init__(self, word_delay: float) -> None:
        self.word_delay = word_delay

    def plan(
        self, messages: list[ModelMessage], info: AgentInfo | None = None
    ) -> tuple[list[str], list[ToolCallPart], str]:
        """Decide the next response: ``(thoughts, tool calls, answer text)``."""
        prompt = _last_user_text(messages)
        last = messages[-1]
        parts = last.parts if isinstance(last, ModelRequest) else []
        returned = [p for p in parts if isinstance(p, ToolReturnPart | RetryPromptPart)]
        if returned:
            return [], [], self._answer(messages, returned, prompt)
        reminder = _reminder(prompt)
        if reminder is not None:
            thoughts = [
                "The user wants a reminder: ",
                f"{reminder}. ",
                "Setting one needs their approval, ",
                "so I'll ask for it with the set_reminder tool.",
            ]
            call = ToolCallPart("set_reminder", {"text": reminder})
            call.tool_call_id = f"call_{uuid.uuid4().hex[:24]}"
            return thoughts, [call], ""
        page_tool = _page_tool(info, prompt)
        if page_tool is not None:
            thoughts = [
                "Only the page knows about the browser: ",
                f"I'll ask it with its {page_tool} tool.",
            ]
            call = ToolCallPart(page_tool, {})
            call.tool_call_id = f"call_{uuid.uuid4().hex[:24]}"
            return thoughts, [call], ""
        attached, earlier = _attachment_refs(messages)
        files = attached or (earlier if _FILE_WORDS_RE.search(prompt) else [])
        expression = extract_expression(prompt)
        if files and (expression is None or _FILE_WORDS_RE.search(prompt)):
            return self._read(files)
        if expression is not None:
            thoughts = [
                "The message contains arithmetic: ",
                f"`{expression}`. ",
                "I should not do it in my head; ",
                "the calculator tool will evaluate it exactly.",
            ]
            call = ToolCallPart("calculate", {"expression": expression})
        else:
            thoughts = [
                "There is no arithmetic in this message, ",
                "so I will show a tool call another way: ",
                "I'll read the server's clock ",
                "and mention the time in my answer.",
            ]
            call = ToolCallPart("server_time", {})
        call.tool_call_id = f"call_{uuid.uuid4().hex[:24]}"
        return thoughts, [call], ""

    def _read(self, files: list[dict[str, Any]]) -> tuple[list[str], list[ToolCallPart], str]:
        """Read each text file with ``read_attachment``; a binary one is answered at once."""
        names = ", ".join(f"`{ref.get('name') or ref['id']}`" for ref in files)
        texts = [ref for ref in files if _is_text(str(ref.get("mime") or ""))]
        if not texts:
            return [], [], "\n\n".join(_binary_summary(ref) for ref in files)
        thoughts = [
            "The message refers to an attached file: ",
            f"{names}. ",
            "I'll read it with the read_attachment tool ",
            "and quote what it says.",
        ]
        calls = [
            ToolCallPart(
                "read_attachment",
                {"attachment_id": ref["id"]},
                tool_call_id=f"call_{uuid.uuid4().hex[:24]}",
            )
            for ref in texts
        ]
        return thoughts, calls, ""

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """The non-streamed form of the script, for ``agent.run()``."""
        thoughts, calls, answer = self.plan(messages, info)
        if not calls:
            return ModelResponse(parts=[TextPart(answer)])
        return ModelResponse(parts=[ThinkingPart("".join(thoughts)), *calls])

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls | DeltaThinkingCalls]:
        """The streamed form: thinking deltas, then tool-call deltas, or the answer by words."""
        thoughts, calls, answer = self.plan(messages, info)
        if not calls:
            words = answer.split(" ")
            for index, word in enumerate(words):
                yield word if index == len(words) - 1 else f"{word} "
                await self._pause()
            return
        for thought in thoughts:
            yield {0: DeltaThinkingPart(content=thought)}
            await self._pause()
        for index, call in enumerate(calls, start=1):
            encoded = call.args_as_json_str()
            middle = len(encoded) // 2
            yield {
                index: DeltaToolCall(
                    name=call.tool_name, json_args=encoded[:middle], tool_call_id=call.tool_call_id
                )
            }
            yield {index: DeltaToolCall(json_args=encoded[middle:])}

    def _answer(
        self,
        messages: list[ModelMessage],
        returned: list[ToolReturnPart | RetryPromptPart],
        prompt: str,
    ) -> str:
        reads = [p for p in returned if p.tool_name == "read_attachment"]
        if reads:
            return self._files_answer(messages, reads)
        part = returned[-1]
        if part.tool_name == "set_reminder" and isinstance(part, ToolReturnPart):
            if part.outcome == "denied":
                return "All right: no reminder, as you said."
            if part.outcome == "success":
                return f"Done. {part.content}."
        if (
            isinstance(part, ToolReturnPart)
            and part.outcome == "success"
            and (part.tool_name not in _OWN_TOOLS)
        ):
            return f"Your browser says: {part.model_response_str()}"
        if isinstance(part, RetryPromptPart) or part.outcome != "success":
            answer = f"The {part.tool_name} tool could not help this time: {part.content}"
        elif part.tool_name == "calculate":
            expression = extract_expression(prompt) or "that"
            answer = f"I asked the calculator, and {expression} = {part.content}."
        elif _wants_markdown(prompt):
            answer = _MARKDOWN_ANSWER
        else:
            answer = (
                f"I checked the server's clock: it is {_format_time(str(part.content))}. "
                "Ask me some arithmetic, like 12 * (3 + 4), to see the calculator tool."
            )
        if _wants_long_answer(prompt):
            answer = f"{answer} {_LONG_TAIL}"
        return answer

    def _files_answer(
        self, messages: list[ModelMessage], reads: list[ToolReturnPart | RetryPromptPart]
    ) -> str:
        """One paragraph per file read, then one per binary file the message also attached."""
        attached, earlier = _attachment_refs(messages[:-1])
        known = {ref["id"]: ref for ref in (*earlier, *attached)}
        asked = {
            call.tool_call_id: str(call.args_as_dict().get("attachment_id", ""))
            for message in messages
            if isinstance(message, ModelResponse)
            for call in message.parts
            if isinstance(call, ToolCallPart)
        }
        paragraphs = []
        for part in reads:
            attachment_id = asked.get(part.tool_call_id or "", "")
            ref = known.get(attachment_id, {"id": attachment_id})
            if isinstance(part, RetryPromptPart) or part.outcome != "success":
                paragraphs.append(
                    f"The read_attachment tool could not help this time: {part.content}"
                )
            elif isinstance(part.content, str):
                paragraphs.append(_file_summary(ref, part.content))
            else:
                paragraphs.append(_binary_summary(ref))
        read = set(asked.values())
        files = attached or earlier
        paragraphs += [_binary_summary(ref) for ref in files if ref["id"] not in read]
        return "\n\n".join(paragraphs)

    async def _pause(self) -> None:
        if self.word_delay > 0:
            await asyncio.sleep(self.word_delay)


def scripted_model(*, word_delay: float = 0.04) -> FunctionModel:
    """The demo's scripted model: reasoning, one tool call, then a streamed answer.

    Args:
        word_delay: Seconds to pause between streamed words (``0`` for tests).
    """
    script = _Script(word_delay)
    return FunctionModel(script.respond, stream_function=script.stream, model_name="demo-script")


_OWN_TOOLS = frozenset({"calculate", "server_time", "read_attachment", "set_reminder"})


def build_agent(
    model: str | None = None, *, word_delay: float = 0.04
) -> Agent[None, str | DeferredToolRequests]:
    """Build the example project's agent.

    Args:
        model: A pydantic-ai model name such as ``"openai:gpt-4o"``; ``None`` or ``""`` selects
            the scripted demo model, which needs no API key.
        word_delay: The scripted model's pause between words, in seconds.
    """
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        model or scripted_model(word_delay=word_delay),
        instructions=INSTRUCTIONS,
        tools=[calculate, server_time, read_attachment],
        # A run that calls a tool needing approval ends waiting for it (DeferredToolRequests).
        output_type=[str, DeferredToolRequests],
        name="demo",
    )
    agent.tool_plain(requires_approval=True)(set_reminder)
    return agent
