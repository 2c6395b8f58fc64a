"""``persistence.sharing``: what a snapshot keeps of a thread, and the tokens."""

from __future__ import annotations

from django_pydantic_agent.persistence.sharing import (
    is_share_token,
    new_share_token,
    same_digest,
    share_digest,
    snapshot_messages,
)

THREAD = [
    {"id": "s", "role": "system", "content": "secret instructions"},
    {
        "id": "u",
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "binary", "mimeType": "text/plain", "data": "c2VjcmV0"},
        ],
        "attachments": [{"id": "a1", "name": "notes.txt", "mime": "text/plain", "size": 5}],
        "metadata": {"owner": "alice@example.com"},
    },
    {
        "id": "a",
        "role": "assistant",
        "content": "done",
        "toolCalls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
        "encryptedValue": "opaque",
    },
]


def test_a_snapshot_keeps_only_what_a_reader_sees() -> None:
    shown = snapshot_messages(THREAD, include_attachments=False)
    assert [m["id"] for m in shown] == ["u", "a"]
    assert shown[0] == {"id": "u", "role": "user", "content": [{"type": "text", "text": "look"}]}
    assert "encryptedValue" not in shown[1]
    assert shown[1]["toolCalls"][0]["id"] == "c"
    assert "secret" not in str(shown)
    assert "notes.txt" not in str(shown)


def test_attachments_are_quoted_only_when_included() -> None:
    shown = snapshot_messages(THREAD, include_attachments=True)
    assert shown[0]["attachments"] == [
        {"id": "a1", "name": "notes.txt", "mime": "text/plain", "size": 5}
    ]
    assert "alice@example.com" not in str(shown)


def test_tokens_have_256_bits_and_only_their_digest_matches() -> None:
    token = new_share_token()
    assert is_share_token(token)
    assert len(token) == 43
    assert token != new_share_token()
    assert not is_share_token(token[:-1])
    assert not is_share_token(token + "/")
    assert same_digest(share_digest(token), share_digest(token))
    assert not same_digest(share_digest(token), share_digest(token.upper()))
