"""An ``AGUIServer`` over quota-limited ``contrib.store`` stores, for the quota route tests."""

from __future__ import annotations

from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from tests.agui.agents import scripted_agent

quota = AGUIServer(
    scripted_agent(),
    conversation_store=DefaultConversationStore(max_threads_per_owner=1),
    attachment_store=DefaultAttachmentStore(max_files_per_owner=2, max_bytes_per_owner=10),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="quota"),
)

urlpatterns = [path("quota/", quota.urls)]
