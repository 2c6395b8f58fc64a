"""``persistence.usage``: a run record's usage read into one ledger line, priced by
genai-prices where the model has a price."""

from __future__ import annotations

from decimal import Decimal

from django_pydantic_agent.persistence.usage import RunUsage, UsageTotals, price_tokens, run_usage


def test_a_priced_model_costs_its_genai_prices_rate() -> None:
    line = run_usage(
        {
            "tokens": [
                {
                    "provider": "openai",
                    "model": "gpt-4o",
                    "input_tokens": 1000,
                    "output_tokens": 500,
                }
            ]
        }
    )

    # $2.50 per million input tokens and $10 per million output tokens.
    assert line == RunUsage(
        model="gpt-4o",
        provider="openai",
        input_tokens=1000,
        output_tokens=500,
        total_tokens=1500,
        cost_usd=Decimal("0.0075"),
    )


def test_an_unknown_provider_is_priced_by_the_model_name_alone() -> None:
    entry = {"provider": "function", "model": "gpt-4o", "inputTokens": 1000, "outputTokens": 0}

    assert price_tokens(entry) == Decimal("0.0025")


def test_one_unpriced_entry_leaves_the_whole_run_unpriced_never_free() -> None:
    line = run_usage(
        {
            "tokens": [
                {"model": "gpt-4o", "input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
                {"model": "my-local-model", "input_tokens": 5, "output_tokens": 5},
            ]
        }
    )

    assert line is not None
    assert line.cost_usd is None
    assert (line.input_tokens, line.output_tokens) == (15, 6)


def test_a_usage_without_tokens_is_no_ledger_line() -> None:
    assert run_usage(None) is None
    assert run_usage({}) is None
    assert run_usage({"tokens": "lots"}) is None
    assert price_tokens({"input_tokens": 3}) is None


def test_totals_answer_camel_case_json_with_the_cost_as_a_decimal_string() -> None:
    totals = UsageTotals(
        runs=2, input_tokens=3, output_tokens=4, total_tokens=7, cost_usd=Decimal("0.5")
    )

    assert totals.as_json() == {
        "runs": 2,
        "inputTokens": 3,
        "outputTokens": 4,
        "totalTokens": 7,
        "costUsd": "0.5",
        "unpricedRuns": 0,
        "estimatedRuns": 0,
    }
