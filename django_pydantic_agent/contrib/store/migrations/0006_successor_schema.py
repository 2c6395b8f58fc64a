"""Our schema, 1.0: everything that only adds, renames, widens or re-indexes.

Nothing is dropped here. The predecessor's ``messages`` and ``thread_id`` columns stay until
0007 has copied them and 0008 drops them; attachment ids become UUIDs in 0008 too, after 0007
normalised them. First, a read-only check refuses (before any change) attachment ids that
cannot become UUIDs. The two renamed models take their content types along, as a top-level
``RenameModel`` would.
"""

import django.db.models.deletion
import django.utils.timezone
import django_pydantic_agent.contrib.store.models.conversations
import django_pydantic_agent.contrib.store.models.harness
from django.db import migrations, models

from django_pydantic_agent.contrib.store.migrations._predecessor import (
    OnPredecessorSchema,
    check_attachment_ids,
    rename_content_types,
    restore_content_types,
)


class Migration(migrations.Migration):
    dependencies = [("django_pydantic_agent_store", "0005_storedmemory_storedmemoryoperation")]

    operations = [
        OnPredecessorSchema(
            migrations.RunPython(check_attachment_ids, migrations.RunPython.noop, elidable=False),
            migrations.RenameModel("ConversationAttachment", "StoredConversationAttachment"),
            migrations.RenameModel("StoredMemory", "StoredMemoryFile"),
            migrations.RunPython(rename_content_types, restore_content_types, elidable=False),
            migrations.RenameIndex("storedattachment", new_name="dpa_store_att_owner_created", old_name="django_pyda_owner_i_2ab804_idx"),
            migrations.RenameIndex("storedattachment", new_name="dpa_store_att_owner_sha", old_name="django_pyda_owner_i_46b43c_idx"),
            migrations.RenameIndex("storedrun", new_name="dpa_store_run_started", old_name="django_pyda_owner_i_a8ce09_idx"),
            migrations.RenameIndex("storedstepevent", new_name="dpa_store_event_run", old_name="django_pyda_owner_i_eb059a_idx"),
            migrations.CreateModel(
                name='StoredMessage',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('position', models.PositiveIntegerField()),
                    ('message_id', models.CharField(blank=True, default='', max_length=255)),
                    ('role', models.CharField(blank=True, default='', max_length=32)),
                    ('data', models.JSONField(default=dict)),
                    ('digest', models.CharField(blank=True, default='', max_length=64)),
                ],
                options={
                    'verbose_name': 'message',
                    'verbose_name_plural': 'messages',
                    'ordering': ['conversation', 'position'],
                },
            ),
            migrations.CreateModel(
                name='StoredSnapshotKey',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('owner_id', django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255)),
                    ('run_id', models.CharField(max_length=255)),
                    ('idempotency_key', models.CharField(max_length=255)),
                ],
                options={
                    'verbose_name': 'agent snapshot key',
                },
            ),
            migrations.AlterModelOptions(
                name='storedattachment',
                options={'verbose_name': 'attachment', 'verbose_name_plural': 'attachments'},
            ),
            migrations.AlterModelOptions(
                name='storedconversation',
                options={'verbose_name': 'conversation', 'verbose_name_plural': 'conversations'},
            ),
            migrations.AlterModelOptions(
                name='storedconversationattachment',
                options={'verbose_name': 'conversation attachment', 'verbose_name_plural': 'conversation attachments'},
            ),
            migrations.AlterModelOptions(
                name='storedmemoryfile',
                options={'ordering': ['owner_id', 'path'], 'permissions': [('purge_agent_memory', 'Can purge all agent memory of an owner')], 'verbose_name': 'agent memory file'},
            ),
            migrations.AlterModelOptions(
                name='storedmemoryoperation',
                options={'verbose_name': 'agent memory receipt'},
            ),
            migrations.AlterModelOptions(
                name='storedrun',
                options={'verbose_name': 'agent run'},
            ),
            migrations.AlterModelOptions(
                name='storedsnapshot',
                options={'verbose_name': 'agent run snapshot'},
            ),
            migrations.AlterModelOptions(
                name='storedstepevent',
                options={'verbose_name': 'agent step event'},
            ),
            migrations.AlterModelOptions(
                name='storedtooleffect',
                options={'verbose_name': 'agent tool effect'},
            ),
            migrations.RemoveConstraint(
                model_name='storedattachment',
                name='django_pydantic_agent_attachment_owner_id_unique',
            ),
            migrations.RemoveConstraint(
                model_name='storedconversation',
                name='django_pydantic_agent_store_owner_thread_unique',
            ),
            migrations.RemoveConstraint(
                model_name='storedconversationattachment',
                name='django_pydantic_agent_conversation_attachment_unique',
            ),
            migrations.RemoveConstraint(
                model_name='storedmemoryfile',
                name='django_pydantic_agent_memory_owner_path_unique',
            ),
            migrations.RemoveConstraint(
                model_name='storedmemoryoperation',
                name='django_pydantic_agent_memory_owner_operation_unique',
            ),
            migrations.RemoveConstraint(
                model_name='storedrun',
                name='django_pydantic_agent_run_owner_run_unique',
            ),
            migrations.RemoveConstraint(
                model_name='storedtooleffect',
                name='django_pydantic_agent_tool_effect_owner_run_call_unique',
            ),
            migrations.RemoveIndex(
                model_name='storedconversation',
                name='django_pyda_owner_i_8b93b5_idx',
            ),
            migrations.RemoveIndex(
                model_name='storedsnapshot',
                name='django_pyda_owner_i_59abe8_idx',
            ),
            migrations.RemoveIndex(
                model_name='storedtooleffect',
                name='django_pyda_owner_i_b79813_idx',
            ),
            migrations.AddField(
                model_name='storedmemoryfile',
                name='write_metadata',
                field=models.TextField(blank=True, null=True),
            ),
            migrations.AddField(
                model_name='storedrun',
                name='registration_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AddField(
                model_name='storedsnapshot',
                name='idempotency_key',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AddField(
                model_name='storedstepevent',
                name='idempotency_key',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedattachment',
                name='created_at',
                field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
            ),
            migrations.AlterField(
                model_name='storedattachment',
                name='file',
                field=models.FileField(blank=True, db_index=True, max_length=255, storage=django_pydantic_agent.contrib.store.models.conversations.attachment_storage, upload_to='django_pydantic_agent/attachments/'),
            ),
            migrations.AlterField(
                model_name='storedconversation',
                name='created_at',
                field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
            ),
            migrations.AlterField(
                model_name='storedconversation',
                name='updated_at',
                field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
            ),
            migrations.AlterField(
                model_name='storedconversationattachment',
                name='created_at',
                field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
            ),
            migrations.AlterField(
                model_name='storedmemoryfile',
                name='content',
                field=models.TextField(blank=True),
            ),
            migrations.AlterField(
                model_name='storedmemoryfile',
                name='operation_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedmemoryfile',
                name='owner_id',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255),
            ),
            migrations.AlterField(
                model_name='storedmemoryfile',
                name='path',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=500),
            ),
            migrations.AlterField(
                model_name='storedmemoryoperation',
                name='existed',
                field=models.BooleanField(),
            ),
            migrations.AlterField(
                model_name='storedmemoryoperation',
                name='owner_id',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255),
            ),
            migrations.AlterField(
                model_name='storedmemoryoperation',
                name='version',
                field=models.CharField(blank=True, max_length=32, null=True),
            ),
            migrations.AlterField(
                model_name='storedrun',
                name='agent_name',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedrun',
                name='conversation_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedrun',
                name='metadata',
                field=models.JSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='storedrun',
                name='owner_id',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255),
            ),
            migrations.AlterField(
                model_name='storedrun',
                name='parent_run_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedsnapshot',
                name='agent_name',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedsnapshot',
                name='conversation_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedsnapshot',
                name='owner_id',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255),
            ),
            migrations.AlterField(
                model_name='storedsnapshot',
                name='parent_run_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedsnapshot',
                name='state',
                field=models.CharField(choices=[('complete', 'Complete'), ('interrupted', 'Interrupted')], default='complete', max_length=16),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='agent_name',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='conversation_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='error',
                field=models.TextField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='metadata',
                field=models.JSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='owner_id',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='parent_run_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='tool_call_id',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedstepevent',
                name='tool_name',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedtooleffect',
                name='effect_summary',
                field=models.TextField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='storedtooleffect',
                name='ended_at',
                field=models.DateTimeField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='storedtooleffect',
                name='idempotency_key',
                field=models.CharField(blank=True, max_length=255, null=True),
            ),
            migrations.AlterField(
                model_name='storedtooleffect',
                name='owner_id',
                field=django_pydantic_agent.contrib.store.models.harness.BinaryCharField(max_length=255),
            ),
            migrations.AlterField(
                model_name='storedtooleffect',
                name='status',
                field=models.CharField(choices=[('started', 'Started'), ('completed', 'Completed'), ('failed', 'Failed')], max_length=16),
            ),
            migrations.AddIndex(
                model_name='storedattachment',
                index=models.Index(fields=['created_at'], name='dpa_store_att_created'),
            ),
            migrations.AddIndex(
                model_name='storedconversation',
                index=models.Index(fields=['owner_id', '-updated_at', '-id'], name='dpa_store_conv_owner_upd'),
            ),
            migrations.AddIndex(
                model_name='storedconversation',
                index=models.Index(fields=['updated_at'], name='dpa_store_conv_updated'),
            ),
            migrations.AddIndex(
                model_name='storedrun',
                index=models.Index(fields=['owner_id', 'conversation_id'], name='dpa_store_run_conversation'),
            ),
            migrations.AddIndex(
                model_name='storedrun',
                index=models.Index(fields=['owner_id', 'parent_run_id'], name='dpa_store_run_parent'),
            ),
            migrations.AddIndex(
                model_name='storedsnapshot',
                index=models.Index(fields=['owner_id', 'run_id', 'state'], name='dpa_store_snapshot_run'),
            ),
            migrations.AddIndex(
                model_name='storedtooleffect',
                index=models.Index(fields=['owner_id', 'run_id', 'status'], name='dpa_store_effect_run'),
            ),
            migrations.AddConstraint(
                model_name='storedconversation',
                constraint=models.UniqueConstraint(fields=('owner_id', 'thread_id'), name='dpa_store_conversation_owner_thread'),
            ),
            migrations.AddConstraint(
                model_name='storedconversationattachment',
                constraint=models.UniqueConstraint(fields=('conversation', 'attachment'), name='dpa_store_link_unique'),
            ),
            migrations.AddConstraint(
                model_name='storedmemoryfile',
                constraint=models.UniqueConstraint(fields=('owner_id', 'path'), name='dpa_store_memory_path'),
            ),
            migrations.AddConstraint(
                model_name='storedmemoryoperation',
                constraint=models.UniqueConstraint(fields=('owner_id', 'operation_id'), name='dpa_store_memory_operation'),
            ),
            migrations.AddConstraint(
                model_name='storedrun',
                constraint=models.UniqueConstraint(fields=('owner_id', 'run_id'), name='dpa_store_run_owner_run'),
            ),
            migrations.AddConstraint(
                model_name='storedstepevent',
                constraint=models.UniqueConstraint(condition=models.Q(('idempotency_key__isnull', False)), fields=('owner_id', 'run_id', 'idempotency_key'), name='dpa_store_event_idempotency'),
            ),
            migrations.AddConstraint(
                model_name='storedtooleffect',
                constraint=models.UniqueConstraint(fields=('owner_id', 'run_id', 'tool_call_id'), name='dpa_store_effect_call'),
            ),
            migrations.AddField(
                model_name='storedmessage',
                name='conversation',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='message_rows', to='django_pydantic_agent_store.storedconversation'),
            ),
            migrations.AddConstraint(
                model_name='storedsnapshotkey',
                constraint=models.UniqueConstraint(fields=('owner_id', 'run_id', 'idempotency_key'), name='dpa_store_snapshot_key'),
            ),
            migrations.AddConstraint(
                model_name='storedmessage',
                constraint=models.UniqueConstraint(fields=('conversation', 'position'), name='dpa_store_message_position'),
            ),
        ),
    ]
