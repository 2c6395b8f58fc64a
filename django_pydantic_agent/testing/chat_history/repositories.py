"""Scenarios S41-S42: the repository calls themselves, and owner isolation."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from ag_ui.core import (
    UserMessage,
)

from django_pydantic_agent.chat_history import (
    ChatCreate,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    participant_id,
)
from django_pydantic_agent.testing.agui_script import (
    RF,
    RS,
    TMC,
    TME,
    TMS,
    run_input,
)
from django_pydantic_agent.testing.chat_history._harness import (
    COMPLETE,
    OTHER_USER,
    USER,
    ChatHistoryHarness,
    OpenRepositories,
    call_shape,
    shape,
    step_shape,
)

__all__ = ["RepositoryScenarios"]


class RepositoryScenarios(ChatHistoryHarness):
    """S41-S42: direct repository calls, cold replicas, two users."""

    # -- S41, S42: repositories ---------------------------------------------------------------

    async def test_s41_unknown_ids_give_none_and_missing_parents_raise(
        self, open_repositories: OpenRepositories
    ) -> None:
        chat_repo, message_repo = self._pair(open_repositories)
        unknown = uuid4()
        assert await message_repo.update_message(unknown, MessageUpdate(content="x")) is None
        assert await message_repo.get_message(unknown) is None
        assert (
            await message_repo.update_message_tool_call(unknown, MessageToolCallUpdate(content="x"))
            is None
        )
        assert (
            await message_repo.update_message_reasoning(
                unknown, MessageReasoningUpdate(content="x")
            )
            is None
        )
        assert await message_repo.get_tool_call_by_agui_id(unknown, "tc1") is None
        assert await message_repo.get_chat_messages(unknown) == []
        assert await message_repo.get_last_messages([unknown]) == {}
        assert await chat_repo.update_chat_name(unknown, "x") is None
        assert await chat_repo.delete_chat(unknown) is None
        assert await chat_repo.get_chat_by_thread_id(USER, "nowhere") is None
        # The contract fixes the exception type; the wording is the backend's own.
        with pytest.raises(ValueError):  # noqa: PT011
            await message_repo.create_message(MessageCreate(chat_uuid=None, content="x"))
        with pytest.raises(ValueError):  # noqa: PT011
            await message_repo.create_message(MessageCreate(chat_uuid=unknown, content="x"))
        with pytest.raises(ValueError):  # noqa: PT011
            await message_repo.create_message_tool_call(MessageToolCallCreate(message_uuid=unknown))
        with pytest.raises(ValueError):  # noqa: PT011
            await message_repo.create_message_reasoning(
                MessageReasoningCreate(message_uuid=unknown)
            )
        with pytest.raises(ValueError):  # noqa: PT011
            await chat_repo.create_chat(ChatCreate(thread_id=None, user_uuid=USER))
        with pytest.raises(ValueError):  # noqa: PT011
            await chat_repo.create_chat(ChatCreate(thread_id="t1", user_uuid=None))
        async with message_repo.transaction():
            pass

    async def test_s41_chats_are_idempotent_per_user_and_thread_and_renamable(
        self, open_repositories: OpenRepositories
    ) -> None:
        chat_repo, _ = self._pair(open_repositories)
        first = await chat_repo.create_chat(ChatCreate(name="One", thread_id="t1", user_uuid=USER))
        again = await chat_repo.create_chat(ChatCreate(name="Two", thread_id="t1", user_uuid=USER))
        assert again.chat_uuid == first.chat_uuid
        assert again.name == "One"
        renamed = await chat_repo.update_chat_name(first.chat_uuid, "Renamed")
        assert renamed is not None
        assert renamed.name == "Renamed"
        cold_chats, _ = self._pair(open_repositories)
        seen = await cold_chats.get_chat_by_thread_id(USER, "t1")
        assert seen is not None
        assert (seen.chat_uuid, seen.name) == (first.chat_uuid, "Renamed")
        assert await cold_chats.get_chat_by_thread_id(USER, "T1") is None

    async def test_s41_messages_read_back_in_sequence_order(
        self, open_repositories: OpenRepositories
    ) -> None:
        chat_repo, message_repo = self._pair(open_repositories)
        chat = await chat_repo.create_chat(ChatCreate(thread_id="t1", user_uuid=USER))
        for index in range(7):
            await message_repo.create_message(
                MessageCreate(
                    chat_uuid=chat.chat_uuid,
                    role="user" if index % 2 == 0 else "assistant",
                    agui_id=f"m{index}",
                    content=f"#{index}",
                    # Application timestamps must not reorder the sequence.
                    timestamp=datetime(2030 - index, 1, 1, tzinfo=UTC),
                )
            )
        _, cold = self._pair(open_repositories)
        messages = await cold.get_chat_messages(chat.chat_uuid)
        assert [m.agui_id for m in messages] == [f"m{i}" for i in range(7)]
        sequence = [m.sequence_id for m in messages]
        assert sequence == sorted(sequence)
        assert len(set(sequence)) == 7

    async def test_s41_last_messages_and_deletion(
        self, open_repositories: OpenRepositories
    ) -> None:
        chat_repo, message_repo = self._pair(open_repositories)
        chats = [
            await chat_repo.create_chat(ChatCreate(thread_id=f"c{i}", user_uuid=USER))
            for i in range(3)
        ]
        c1, c2, empty = (chat.chat_uuid for chat in chats)
        created = {}
        for chat_uuid, ids in ((c1, ["a", "b"]), (c2, ["c"])):
            for agui_id in ids:
                created[agui_id] = await message_repo.create_message(
                    MessageCreate(
                        chat_uuid=chat_uuid, role="user", agui_id=agui_id, content=agui_id
                    )
                )
        _, cold = self._pair(open_repositories)
        last = await cold.get_last_messages([c1, c2, empty])
        assert {key: message.agui_id for key, message in last.items()} == {c1: "b", c2: "c"}

        deleted = await chat_repo.delete_chat(c1)
        assert deleted is not None
        assert deleted.chat_uuid == c1
        cold_chats, cold = self._pair(open_repositories)
        assert await cold.get_chat_messages(c1) == []
        assert await cold.get_message(created["a"].message_uuid) is None
        assert await cold_chats.update_chat_name(c1, "x") is None
        assert await cold_chats.delete_chat(c1) is None
        assert await cold_chats.get_chat_by_thread_id(USER, "c0") is None
        assert [m.agui_id for m in await cold.get_chat_messages(c2)] == ["c"]

    async def test_s41_a_cold_replica_reads_and_updates_by_uuid(
        self, open_repositories: OpenRepositories
    ) -> None:
        chat_repo, message_repo = self._pair(open_repositories)
        chat = await chat_repo.create_chat(ChatCreate(thread_id="t1", user_uuid=USER))
        message = await message_repo.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", agui_id="m1", content="a")
        )
        call = await message_repo.create_message_tool_call(
            MessageToolCallCreate(
                message_uuid=message.message_uuid, agui_id="tc1", tool_call_id="tc1", name="f"
            )
        )
        step = await message_repo.create_message_reasoning(
            MessageReasoningCreate(message_uuid=message.message_uuid, agui_id="r1")
        )

        _, cold = self._pair(open_repositories)
        found = await cold.get_message(message.message_uuid)
        assert found is not None
        assert found.agui_id == "m1"
        by_agui = await cold.get_message_by_agui_id(chat.chat_uuid, "m1")
        assert by_agui is not None
        assert by_agui.message_uuid == message.message_uuid
        _, cold = self._pair(open_repositories)
        updated = await cold.update_message(
            message.message_uuid, MessageUpdate(content="ab", status=COMPLETE, in_progress=False)
        )
        assert updated is not None
        assert updated.content == "ab"
        _, cold = self._pair(open_repositories)
        changed_call = await cold.update_message_tool_call(
            call.uuid, MessageToolCallUpdate(arguments="{}", status=COMPLETE, in_progress=False)
        )
        assert changed_call is not None
        assert changed_call.arguments == "{}"
        _, cold = self._pair(open_repositories)
        changed_step = await cold.update_message_reasoning(
            step.uuid, MessageReasoningUpdate(content="why", status=COMPLETE)
        )
        assert changed_step is not None
        assert changed_step.content == "why"

        _, cold = self._pair(open_repositories)
        final = await cold.get_message(message.message_uuid)
        assert final is not None
        assert shape(final) == ("assistant", "m1", "ab", COMPLETE, False)
        assert [call_shape(c) for c in final.tool_calls] == [
            ("tc1", "f", "{}", "", COMPLETE, False)
        ]
        assert [step_shape(r) for r in final.reasonings] == [("r1", "", "why", COMPLETE, True)]
        by_call = await cold.get_tool_call_by_agui_id(message.message_uuid, "tc1")
        assert by_call is not None
        assert by_call.uuid == call.uuid

    async def test_s41_updates_apply_only_what_they_set_and_deltas_are_idempotent(
        self, open_repositories: OpenRepositories
    ) -> None:
        chat_repo, message_repo = self._pair(open_repositories)
        chat = await chat_repo.create_chat(ChatCreate(thread_id="t1", user_uuid=USER))
        message = await message_repo.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content="a", error="e")
        )
        same = await message_repo.update_message(message.message_uuid, MessageUpdate())
        assert same is not None
        assert (same.content, same.error) == ("a", "e")
        delta = MessageUpdate(content_delta="b", content_offset=1)
        await message_repo.update_message(message.message_uuid, delta)
        retried = await message_repo.update_message(message.message_uuid, delta)
        assert retried is not None
        assert retried.content == "ab"
        _, cold = self._pair(open_repositories)
        final = await cold.get_message(message.message_uuid)
        assert final is not None
        assert (final.content, final.error) == ("ab", "e")

    async def test_s42_two_users_on_the_same_thread_id_never_meet(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(open_repositories, RS(), TMS("m1"), TMC("m1", "Hi U1"), TME("m1"), RF())
        await self.play(
            open_repositories,
            RS(),
            TMS("n1"),
            TMC("n1", "Hi U2"),
            TME("n1"),
            RF(),
            input=run_input(UserMessage(id="v1", content="Bonjour")),
            user=OTHER_USER,
        )
        mine, my_messages = await self.stored(open_repositories)
        theirs, their_messages = await self.stored(open_repositories, user=OTHER_USER)
        assert mine is not None
        assert theirs is not None
        assert mine.chat_uuid != theirs.chat_uuid
        assert mine.dedup_key != theirs.dedup_key
        assert list(theirs.participants) == [participant_id(OTHER_USER)]
        assert [m.content for m in my_messages] == ["Hello", "Hi U1"]
        assert [m.content for m in their_messages] == ["Bonjour", "Hi U2"]
        chat_repo, _ = self._pair(open_repositories)
        assert [c.chat_uuid for c in await chat_repo.get_all_chats(USER)] == [mine.chat_uuid]
        everyone = {c.chat_uuid for c in await chat_repo.get_all_chats(None)}
        assert {mine.chat_uuid, theirs.chat_uuid} <= everyone
