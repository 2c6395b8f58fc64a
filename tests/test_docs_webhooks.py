"""The code of ``docs/webhooks.md`` runs as printed: the URLconf builds a webhook-sending
server, the receiver's ``verify`` accepts what the server signs (and nothing else), and the
cron command delivers a queued event to a real local receiver."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from django_pydantic_agent.contrib.store.models import StoredWebhookDelivery
from django_pydantic_agent.webhooks import new_secret
from django_pydantic_agent.webhooks.signing import signed_headers
from tests.agui.test_webhooks import Receiver

PAGE = (Path(__file__).resolve().parent.parent / "docs" / "webhooks.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE, flags=re.DOTALL)


def _run(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/webhooks.md", "exec"), namespace)
    return namespace


def test_the_urlconf_builds_a_server_whose_signatures_the_receiver_snippet_verifies() -> None:
    urlconf, receiver = (_run(code) for code in _blocks("python"))
    options = urlconf["server"].webhooks
    assert options.url == ("https://hooks.example.com/agent",)
    body = b'{"type":"run.finished"}'
    headers = signed_headers(options.keys, "msg_1", 1_700_000_000, body)
    assert receiver["verify"](options.secret[0], headers, body)
    assert not receiver["verify"](new_secret(), headers, body)
    assert not receiver["verify"](options.secret[0], headers, body + b" ")


@pytest.mark.django_db(transaction=True)
def test_the_cron_command_delivers_what_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.agui.urls_webhooks import hooked

    [command] = _blocks("bash")
    words = shlex.split(command.strip())
    assert words[:3] == ["python", "manage.py", "agent_store_deliver_webhooks"]
    receiver = Receiver([])
    receiver.thread.start()
    assert hooked.webhook_dispatcher is not None
    options = hooked.webhook_dispatcher.options
    monkeypatch.setattr(hooked.webhook_dispatcher, "options", replace(options, url=receiver.url))
    try:
        StoredWebhookDelivery.objects.create(
            event_id="msg_docs", event_type="run.finished", url=receiver.url, payload="{}"
        )
        call_command(words[2], "tests.agui.urls_webhooks.hooked")
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        receiver.thread.join()
    assert StoredWebhookDelivery.objects.get().status == "delivered"
    assert len(receiver.received) == 1
