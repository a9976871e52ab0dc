"""Smoke tests of the benchmark harness plumbing: scenario lists, aggregation, the table, and one tiny
end-to-end run (embedded cluster child, preload, one worker per run, result files, JSON lines)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_async.bench import cli
from rmq_async.bench.cluster import ChildCluster
from rmq_async.bench.machine import percentile, spread
from rmq_async.bench.report import format_table, summarize
from rmq_async.bench.scenarios import Meter


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_scenario_lists_expand_in_suite_order() -> None:
    assert cli._scenarios(["default"]) == list(cli.DEFAULT_SUITE)
    assert cli._scenarios(["latency", "push", "push"]) == ["push", "latency"]
    assert cli._scenarios(["all"]) == list(cli.FULL_SUITE)
    with pytest.raises(SystemExit, match="unknown scenario 'nope'"):
        cli._scenarios(["nope"])
    args = parse()
    assert (args.scenario, args.loop, args.runs, args.messages) == (["default"], "both", 3, 200_000)


async def test_meter_times_first_to_last_message() -> None:
    m = Meter(5)
    assert m.rate() is None
    m.add(1)
    first = m.first
    m.add(2)
    assert m.last == first and not m.done.is_set()  # no clock read between the first and the last
    m.add(3)  # past the target: the last message's time is taken, done is set
    assert m.done.is_set() and m.last > first
    last = m.last
    m.add(1)  # a duplicate after the end moves nothing
    assert m.last == last and m.seen == 7
    assert m.rate() == pytest.approx(6 / (last - first))
    cpu = m.cpu_us_per_msg()
    assert cpu is not None and cpu >= 0 and m.result()["cpu_us_per_msg"] == cpu
    assert Meter(3).cpu_us_per_msg() is None  # nothing seen


def test_percentile_and_spread() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert percentile(xs, 0.5) == 51.0
    assert percentile(xs, 0.99) == 100.0
    assert percentile([], 0.5) is None
    assert spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}


def test_summary_medians_skips_and_errors() -> None:
    runs = [
        {"msgs_per_s": 100.0, "p50_ms": 1.0, "p99_ms": 9.0, "peak_rss_mb": 40.0},
        {"msgs_per_s": 300.0, "p50_ms": 3.0, "p99_ms": 7.0, "peak_rss_mb": 42.0},
        {"msgs_per_s": 200.0, "p50_ms": 2.0, "p99_ms": 8.0, "peak_rss_mb": 41.0},
        {"error": "TimeoutError: boom"},
    ]
    s = summarize("latency", "uvloop", "127.0.0.1:9876", runs)
    assert (s["msgs_per_s"], s["msgs_per_s_min"], s["msgs_per_s_max"]) == (200.0, 100.0, 300.0)
    assert (s["p50_ms"], s["p99_ms"], s["peak_rss_mb"]) == (2.0, 8.0, 41.0)
    assert len(s["runs"]) == 3 and s["errors"] == ["TimeoutError: boom"]
    assert set(s) >= {"scenario", "msgs_per_s", "runs", "p50_ms", "p99_ms", "peak_rss_mb", "loop", "namesrv"}
    skipped = summarize("push-orderly", "asyncio", "x", [{"skipped": "no orderly mode"}])
    assert skipped["msgs_per_s"] is None and skipped["p50_ms"] is None and skipped["skipped"]
    table = format_table([s, skipped])
    assert "200" in table and "1 run(s) failed" in table and "skipped: no orderly mode" in table


def test_child_cluster_starts_by_exec_and_stops() -> None:
    cluster = ChildCluster(queues=2)
    addr = cluster.start()
    proc = cluster.proc
    assert proc is not None and addr.startswith("127.0.0.1:")
    cluster.stop()
    assert proc.returncode is not None  # reaped, not left running
    assert cluster.proc is None


def test_tiny_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("push", "raw-pull", "--messages", "400", "--queues", "2", "--runs", "1", "--loop", "asyncio",
                 "--out", str(tmp_path), "--no-plots")  # fmt: skip
    assert cli.run(args) == 0
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines() if ln.startswith("{")]
    assert [(x["scenario"], x["loop"]) for x in lines] == [("push", "asyncio"), ("raw-pull", "asyncio")]
    for x in lines:
        assert x["msgs_per_s"] > 0 and len(x["runs"]) == 1 and x["namesrv"].startswith("127.0.0.1:")
        assert x["p50_ms"] is None and x["peak_rss_mb"] > 0
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["packages"]["anyio"]
    assert doc["runs"]["push/asyncio"][0]["messages"] >= 400
    assert "push" in (tmp_path / "table.txt").read_text()


def test_worker_reports_a_failure_as_json() -> None:
    res = cli.run_worker("push", {"namesrv": "127.0.0.1:1", "messages": 1, "timeout": 1.0}, 60)
    assert res == {"error": "KeyError: 'topic'"}


def test_cli_has_the_bench_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rmq_async.cli", "bench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--namesrv" in out and "--loop" in out and "raw-pull" in out
