"""Tables behind spend budgets and the usage ledger.

``StoredSpendCounter`` is one window of a ``SpendLimits`` budget (the harness's store key), its
four counters held as integers (dollars in billionths, as ``RedisSpendStore`` holds them) and
incremented in place by ``DefaultSpendStore``, so workers sharing the database share the budget.
``StoredRunUsage`` is the ledger: one row per finished run, with its tokens and its cost, written
by ``DefaultRunStore`` when the run ends and summed per thread, per owner and per day.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

__all__ = ["SPEND_KEY_MAX_LENGTH", "StoredRunUsage", "StoredSpendCounter"]

_APP_LABEL = "django_pydantic_agent_store"

#: The longest counter key stored as it is; a longer one is stored as its digest.
SPEND_KEY_MAX_LENGTH = 255


class StoredSpendCounter(models.Model):
    """What one budget window has accumulated (``SpendLimits``' ``Spent``), shared by workers.

    ``key`` is the harness's store key (``name|window|scope|period``), or ``sha256:<hex>`` for a
    key longer than ``SPEND_KEY_MAX_LENGTH``. ``usd_nanos`` is dollars in billionths, so sums are
    exact. ``expires_at`` is when the counter stops counting (``None``: never); an expired row
    reads as zero and its next write starts it again.
    """

    key = models.CharField(max_length=SPEND_KEY_MAX_LENGTH, unique=True)
    usd_nanos = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    requests = models.BigIntegerField(default=0)
    unpriced_requests = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "spend counter"
        verbose_name_plural = "spend counters"

    def __str__(self) -> str:
        return self.key


class StoredRunUsage(models.Model):
    """One finished run in the usage ledger: its tokens, and its cost where the model is priced.

    ``cost_usd`` is ``None`` when the model has no price in pydantic-ai's pricing (genai-prices),
    so an unpriced run never reads as free. ``finished_at`` is when the run ended (its day is the
    day it counts against). ``estimated`` says the tokens are partly an estimate: the run was
    stopped or failed before its provider reported them all.
    """

    owner_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    finished_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, blank=True, default="")
    model = models.CharField(max_length=255, blank=True, default="")
    provider = models.CharField(max_length=255, blank=True, default="")
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=20, decimal_places=9, null=True, blank=True)
    estimated = models.BooleanField(default=False)

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "run usage"
        verbose_name_plural = "usage ledger"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "thread_id", "run_id"], name="dpa_store_usage_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["owner_id", "finished_at"], name="dpa_store_usage_owner_day"),
            models.Index(fields=["finished_at"], name="dpa_store_usage_day"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} ({self.total_tokens} tokens)"
