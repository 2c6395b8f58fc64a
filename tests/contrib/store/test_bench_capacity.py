"""``bench.capacity``: how py-spy's samples are split and how one wave's row reads."""

from __future__ import annotations

from pathlib import Path

from bench.capacity import Wave, split


def test_a_sample_goes_to_the_first_caller_that_names_a_part(tmp_path: Path) -> None:
    raw = tmp_path / "server.txt"
    relay = "django_pydantic_agent/agui/relay.py"
    stacks = [
        # A relay write, innermost in Django's cache and asyncio: the relay's.
        f"thread (1);run (asyncio/events.py:80);_flush ({relay}:50);set_many (x.py:1) 6",
        # An ORM update under the flusher under the engine: a storage write (the innermost).
        "thread (2);drive (django_pydantic_agent/agui/engine.py:5);"
        "_flush (django_pydantic_agent/chat_history/_flushing.py:9);"
        "update (django/db/models/query.py:1) 3",
        # Only the event loop's own frames: scheduling.
        "thread (1);_run_once (asyncio/base_events.py:1900) 1",
        # An executor thread waiting on its queue is not an event's CPU.
        "thread (3);_bootstrap (threading.py:1);_worker (concurrent/futures/thread.py:81) 10",
    ]
    raw.write_text("\n".join(stacks) + "\n")

    shares = dict(split(raw))

    assert shares == {
        "relay writes (the live log to the cache)": 0.3,
        "coalesced storage writes (and folding events into records)": 0.15,
        "the event loop (scheduling, select)": 0.05,
        "executor threads waiting for work": 0.5,
    }


def test_a_wave_row_gives_p99_gap_cpu_per_event_and_run_and_rss_per_stream() -> None:
    wave = Wave(
        streams=100,
        gaps=[0.1] * 99 + [2.0],
        firsts=[0.05] * 100,
        seconds=10.0,
        alone=4.0,
        events=20_000,
        failed=0,
        cpu=4.0,
        rss_kib=25_600,
        load_cpu=2.5,
    )

    cells = [cell.strip() for cell in wave.row().strip("|").split("|")]

    assert cells[0] == "100"
    assert cells[1] == "100 / 100 / 2,000"  # p50 / p99 / max of the largest gaps, ms
    assert cells[7:10] == ["200", "40", "256"]  # µs/event, ms/run, KiB/stream
    assert cells[10] == "2.5 s (25% of a core)"
