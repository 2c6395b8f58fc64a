"""Record rows for run persistence, thread uuids, and run records.

``StoredMessage`` gains the columns of a chat-history record row (``message_uuid``, ``content``,
``record``, ``tool_calls``, ``reasonings``, ``status``, ``run_id``); existing rows stay wire
rows. ``StoredConversation.chat_uuid`` is added nullable, filled with a fresh uuid per row,
then made unique. ``StoredAgentRun`` is new.
"""

import uuid

import django.utils.timezone
from django.db import migrations, models


def fill_chat_uuids(apps, schema_editor):
    conversations = apps.get_model("django_pydantic_agent_store", "StoredConversation")
    rows = conversations.objects.using(schema_editor.connection.alias).filter(chat_uuid=None)
    for pk in rows.values_list("pk", flat=True).iterator():
        conversations.objects.using(schema_editor.connection.alias).filter(pk=pk).update(
            chat_uuid=uuid.uuid4()
        )


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0008_drop_predecessor_columns"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredAgentRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("owner_id", models.CharField(blank=True, default="", max_length=255)),
                ("thread_id", models.CharField(max_length=255)),
                ("run_id", models.CharField(max_length=255)),
                ("status", models.CharField(default="running", max_length=16)),
                ("worker_id", models.CharField(blank=True, default="", max_length=255)),
                ("heartbeat_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("usage", models.JSONField(blank=True, default=dict)),
                ("last_seq", models.PositiveBigIntegerField(default=0)),
                ("error", models.TextField(blank=True, default="")),
            ],
            options={
                "verbose_name": "run record",
                "verbose_name_plural": "run records",
            },
        ),
        migrations.AddField(
            model_name="storedconversation",
            name="chat_uuid",
            field=models.UUIDField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="storedconversation",
            name="save_state",
            field=models.CharField(blank=True, default="", editable=False, max_length=80),
        ),
        migrations.RunPython(fill_chat_uuids, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="storedconversation",
            name="chat_uuid",
            field=models.UUIDField(default=uuid.uuid4, editable=False, unique=True),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="content",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="message_uuid",
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="reasonings",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="record",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="run_id",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="status",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="storedmessage",
            name="tool_calls",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="storedmessage",
            index=models.Index(
                condition=models.Q(("message_uuid__isnull", False)),
                fields=["run_id", "status"],
                name="dpa_store_msg_run_status",
            ),
        ),
        migrations.AddConstraint(
            model_name="storedmessage",
            constraint=models.UniqueConstraint(
                condition=models.Q(("message_uuid__isnull", False)),
                fields=("message_uuid",),
                name="dpa_store_message_uuid",
            ),
        ),
        migrations.AddIndex(
            model_name="storedagentrun",
            index=models.Index(fields=["status", "heartbeat_at"], name="dpa_store_arun_status_hb"),
        ),
        migrations.AddConstraint(
            model_name="storedagentrun",
            constraint=models.UniqueConstraint(
                fields=("owner_id", "thread_id", "run_id"), name="dpa_store_arun_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="storedagentrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "running")),
                fields=("owner_id", "thread_id"),
                name="dpa_store_arun_one_running",
            ),
        ),
    ]
