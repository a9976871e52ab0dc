"""Smoke tests of the benchmark harness plumbing: scenario lists, aggregation, the table, and one tiny
end-to-end run (embedded cluster child, preload, one worker per run, result files, JSON lines), and the
run order and paired push / raw-pull ratio with a fake worker."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rmq_async.bench import cli
from rmq_async.bench.cluster import ChildCluster
from rmq_async.bench.machine import percentile, spread
from rmq_async.bench.report import format_stage_table, format_table, paired_ratio, summarize
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


async def test_meter_counted_inline_as_the_no_op_handlers_do() -> None:
    m = Meter(3)
    stamps = []
    for _ in range(4):
        m.seen += 1  # the handlers' inline form of add(1)
        if m.seen >= m.mark:
            m.passed()
        stamps.append((m.first, m.last, m.done.is_set()))
    assert stamps[0][0] > 0 and stamps[0][0] == stamps[1][1]  # first stamped once, at the first
    assert not stamps[1][2] and stamps[2][2] and stamps[2][1] > stamps[0][0]  # the last at the 3rd
    assert stamps[3] == stamps[2] and m.seen == 4  # nothing moves after the end


def test_percentile_and_spread() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert percentile(xs, 0.5) == 51.0
    assert percentile(xs, 0.99) == 100.0
    assert percentile([], 0.5) is None
    assert spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}


def test_summary_medians_skips_and_errors() -> None:
    runs: list[dict[str, Any]] = [
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


def test_paired_ratio_is_the_median_over_pairs_that_both_succeeded() -> None:
    push: list[dict[str, Any]] = [
        {"msgs_per_s": 1000.0, "cpu_us_per_msg": 10.0},
        {"msgs_per_s": 1100.0, "cpu_us_per_msg": 12.0},
        {"msgs_per_s": 900.0, "cpu_us_per_msg": 9.0},
        {"msgs_per_s": 5000.0, "cpu_us_per_msg": 1.0},
        {"error": "TimeoutError: boom"},
    ]
    raw: list[dict[str, Any]] = [
        {"msgs_per_s": 1500.0, "cpu_us_per_msg": 6.0},
        {"msgs_per_s": 1000.0, "cpu_us_per_msg": 9.0},
        {"msgs_per_s": 1350.0},  # no CPU: only left out of the CPU ratio
        {"error": "TimeoutError: boom"},  # failed: pair left out
        {"msgs_per_s": 1.0, "cpu_us_per_msg": 1.0},  # its push run failed: left out
    ]
    # rates 0.6667, 1.1, 0.6667 -> 0.667 (spread 0.667-1.1 over 3 pairs); CPU 6/10, 9/12 -> 0.675
    assert paired_ratio(push, raw) == {
        "vs_raw_pull": 0.667,
        "vs_raw_pull_min": 0.667,
        "vs_raw_pull_max": 1.1,
        "vs_raw_pull_pairs": 3,
        "vs_raw_pull_cpu": 0.675,
    }
    no_pairs = dict.fromkeys(("vs_raw_pull", "vs_raw_pull_min", "vs_raw_pull_max", "vs_raw_pull_pairs"))
    assert paired_ratio(push, []) == {**no_pairs, "vs_raw_pull_cpu": None}
    assert paired_ratio([{"skipped": "no"}], [{"msgs_per_s": 1.0}]) == {**no_pairs, "vs_raw_pull_cpu": None}
    s = summarize("push", "asyncio", "x", push[:3])
    s.update(paired_ratio(push, raw))
    assert "push/raw 0.67 (3 paired runs 0.67-1.10; CPU 0.68)" in format_table([s])
    s.update(vs_raw_pull_cpu=None)
    assert "push/raw 0.67 (3 paired runs 0.67-1.10)" in format_table([s])
    s.update(vs_raw_pull_pairs=None)  # a summary written before the spread was reported
    assert "push/raw 0.67 (paired runs)" in format_table([s])
    assert "push/raw" not in format_table([summarize("push", "asyncio", "x", push[:3])])


def test_push_and_raw_pull_runs_interleave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # per (scenario, loop): the result of run r
    fake: dict[tuple[str, str], list[dict[str, Any]]] = {
        ("push", "asyncio"): [
            {"msgs_per_s": 1000.0, "cpu_us_per_msg": 10.0},
            {"msgs_per_s": 1100.0, "cpu_us_per_msg": 12.0},
            {"msgs_per_s": 900.0, "cpu_us_per_msg": 9.0},
        ],
        ("raw-pull", "asyncio"): [
            {"msgs_per_s": 1500.0, "cpu_us_per_msg": 6.0},
            {"msgs_per_s": 1000.0, "cpu_us_per_msg": 9.0},
            {"msgs_per_s": 1350.0},
        ],
        ("push", "uvloop"): [
            {"msgs_per_s": 2000.0, "cpu_us_per_msg": 8.0},
            {"msgs_per_s": 2100.0, "cpu_us_per_msg": 8.0},
            {"msgs_per_s": 1800.0, "cpu_us_per_msg": 8.0},
        ],
        ("raw-pull", "uvloop"): [
            {"msgs_per_s": 2500.0, "cpu_us_per_msg": 4.0},
            {"error": "TimeoutError: boom"},
            {"msgs_per_s": 3000.0, "cpu_us_per_msg": 6.0},
        ],
    }
    calls: list[tuple[str, str]] = []
    rates: dict[str, float] = {}

    def run_worker(role: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert role == params["scenario"] and params["namesrv"] == "fake:9876"
        lp = params["loop"]
        calls.append((role, lp))
        if role == "push-cpu":
            return {"skipped": "not today"}
        if role == "latency":
            rates[lp] = params["rate"]
            return {"msgs_per_s": 1.0, "p50_ms": 1.0, "p99_ms": 2.0}
        return fake[role, lp][sum(c == (role, lp) for c in calls) - 1]

    async def create_topic(namesrv: str, topic: str, queues: int) -> None:
        assert namesrv == "fake:9876"

    async def preload(namesrv: str, topic: str, messages: int, size: int) -> float:
        return 1234.0

    monkeypatch.setattr(cli, "run_worker", run_worker)
    monkeypatch.setattr(cli, "create_topic", create_topic)
    monkeypatch.setattr(cli, "preload", preload)
    monkeypatch.setattr(cli, "ChildCluster", None)  # no embedded cluster with --namesrv
    args = parse("latency", "raw-pull", "push-cpu", "push", "--namesrv", "fake:9876", "--runs", "3",
                 "--out", str(tmp_path), "--no-plots")  # fmt: skip
    assert cli.run(args) == 1  # one raw-pull run failed
    a, u, p, rp = "asyncio", "uvloop", "push", "raw-pull"
    assert calls == [
        (p, a), (rp, a), (p, u), (rp, u),  # run 1: push first
        (rp, a), (p, a), (rp, u), (p, u),  # run 2: raw-pull first
        (p, a), (rp, a), (p, u), (rp, u),  # run 3
        ("push-cpu", a),  # skipped: no further runs
        *[("latency", lp) for _ in range(3) for lp in (a, u)],
    ]  # fmt: skip
    assert rates == {a: 500.0, u: 1000.0}  # half the push median: push ran before latency
    out, err = capsys.readouterr()
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert [(x["scenario"], x["loop"]) for x in lines] == [
        (p, a), (p, u), ("push-cpu", a), (rp, a), (rp, u), ("latency", a), ("latency", u)
    ]  # fmt: skip
    push = {x["loop"]: x for x in lines if x["scenario"] == p}
    # asyncio: 1000/1500, 1100/1000, 900/1350 -> 0.667 (not the ratio of the medians, 1000/1350);
    # CPU 6/10, 9/12 (run 3 has no raw CPU) -> 0.675
    assert (push[a]["vs_raw_pull"], push[a]["vs_raw_pull_cpu"]) == (0.667, 0.675)
    # uvloop, raw-pull run 2 failed: 2000/2500, 1800/3000 -> 0.7; CPU 4/8, 6/8 -> 0.625
    assert (push[u]["vs_raw_pull"], push[u]["vs_raw_pull_cpu"]) == (0.7, 0.625)
    assert (push[a]["msgs_per_s"], len(push[a]["runs"]), push[a]["skipped"]) == (1000.0, 3, None)
    assert all("vs_raw_pull" not in x for x in lines if x["scenario"] != p)
    assert lines[2]["skipped"] == "not today" and lines[4]["errors"] == ["TimeoutError: boom"]
    spread_of = ("vs_raw_pull_min", "vs_raw_pull_max", "vs_raw_pull_pairs")
    assert [push[a][k] for k in spread_of] == [0.667, 1.1, 3]
    assert [push[u][k] for k in spread_of] == [0.6, 0.8, 2]
    assert "push/raw 0.67 (3 paired runs 0.67-1.10; CPU 0.68)" in err
    assert "push/raw 0.70 (2 paired runs 0.60-0.80; CPU 0.62)" in err
    doc = json.loads((tmp_path / "result.json").read_text())
    assert list(doc["runs"]) == ["push/asyncio", "push/uvloop", "push-cpu/asyncio", "raw-pull/asyncio",
                                 "raw-pull/uvloop", "latency/asyncio", "latency/uvloop"]  # fmt: skip


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


def test_tiny_run_over_tls(tmp_path: Path) -> None:
    """``rmq-async bench --tls`` without --namesrv: the embedded cluster enforces TLS with a generated
    certificate the clients trust, and the runs complete."""
    argv = ["bench", "push", "--tls", "--messages", "400", "--queues", "2", "--runs", "1",
            "--loop", "asyncio", "--out", str(tmp_path), "--no-plots"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_TLS")}
    cmd = [sys.executable, "-m", "rmq_async.cli", *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "TLS enforcing" in out.stderr
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["runs"]["push/asyncio"][0]["messages"] >= 400


def test_bench_tls_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RMQ_TLS", "RMQ_TLS_CA_FILE"):
        # set first, so monkeypatch restores the variable's absence after _bench_tls sets it (a delenv
        # of an absent variable records nothing: RMQ_TLS=1 leaked into every later test's clients)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    args = parse("--tls-server-cert", "srv.pem", "--tls-server-key", "srv.key", "--tls-mode", "permissive")
    assert cli._bench_tls(args, tmp_path) == {
        "tls_mode": "permissive",
        "tls_cert": "srv.pem",
        "tls_key": "srv.key",
    }
    assert os.environ["RMQ_TLS"] == "1" and "RMQ_TLS_CA_FILE" not in os.environ  # the user's CA: --tls-ca
    kw = cli._bench_tls(parse(), tmp_path)  # generated: the clients trust its CA
    assert kw["tls_mode"] == "enforcing" and Path(kw["tls_cert"]).is_file()
    assert Path(os.environ["RMQ_TLS_CA_FILE"]).is_file()
    with pytest.raises(SystemExit, match="for the embedded cluster"):
        cli.run(parse("--namesrv", "127.0.0.1:1", "--tls-server-cert", "srv.pem", "--out", str(tmp_path)))


def test_worker_reports_a_failure_as_json() -> None:
    res = cli.run_worker("push", {"namesrv": "127.0.0.1:1", "messages": 1, "timeout": 1.0}, 60)
    assert res == {"error": "KeyError: 'topic'"}


def test_cli_has_the_bench_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rmq_async.cli", "bench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--namesrv" in out and "--loop" in out and "raw-pull" in out


def _pool_ratio() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "pool_ratio.py"
    spec = importlib.util.spec_from_file_location("pool_ratio", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pool_ratio_pairs_runs_like_the_harness_and_pools_invocations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool_ratio = _pool_ratio()

    def run(rate: float, cpu: float | None = None) -> dict[str, Any]:
        return {"msgs_per_s": rate} if cpu is None else {"msgs_per_s": rate, "cpu_us_per_msg": cpu}

    first = {
        "runs": {
            "push/asyncio": [run(700, 10), {"error": "TimeoutError: boom"}, run(900, 9)],
            "raw-pull/asyncio": [run(1000, 7), run(1000, 7), run(1000)],  # run 2 paired with a failure
            "push/uvloop": [run(600, 8)],
            "raw-pull/uvloop": [run(1000, 6)],
            "lite-pull/asyncio": [run(5)],
        }
    }
    second = {"runs": {"push/asyncio": [run(500, 4)], "raw-pull/asyncio": [run(1000, 2)]}}
    assert pool_ratio.pairs(first) == {"asyncio": [(0.7, 0.7), (0.9, None)], "uvloop": [(0.6, 0.75)]}
    out = pool_ratio.pool([first, second], 0.7)
    # asyncio pairs 0.7, 0.9 (first) and 0.5 (second); invocation medians 0.8 and 0.5
    assert out["asyncio"]["pairs"] == {
        "n": 3, "median": 0.7, "q1": 0.5, "q3": 0.9, "min": 0.5, "max": 0.9, "reach_target": 2
    }  # fmt: skip
    assert out["asyncio"]["pairs_cpu"]["n"] == 2 and out["asyncio"]["pairs_cpu"]["median"] == 0.6
    assert out["asyncio"]["invocation_medians"]["median"] == 0.65
    assert out["uvloop"]["pairs"]["median"] == 0.6 and out["uvloop"]["pairs"]["reach_target"] == 0
    assert out["all"]["pairs"]["n"] == 4 and out["all"]["pairs"]["reach_target"] == 2
    assert pool_ratio.describe([], 0.7) == {"n": 0}
    files = []
    for i, doc in enumerate((first, second)):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(doc))
    assert pool_ratio.main([*map(str, files), "--target", "0.6"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("2 invocations, push / raw-pull, target 0.6\nasyncio\n")
    want = "pairs, msgs/s       n=3    median 0.700  quartiles 0.500-0.900  range 0.500-0.900  >= target: 2/3"
    assert want in text
    assert pool_ratio.main([*map(str, files), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all"]["pairs"]["median"] == 0.65


def test_rates_and_latency_labels() -> None:
    assert cli.rates("2000") == [2000.0] and cli.rates("2000,20000") == [2000.0, 20000.0]
    for bad in ("fast", "0", "-5", "inf", "2000,"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.rates(bad)
    push: list[dict[str, Any]] = [{"msgs_per_s": 3000.0}, {"msgs_per_s": 5000.0}, {"error": "x"}]
    assert cli._latency_labels(parse("latency"), push) == [("latency", 2500.0)]
    assert cli._latency_labels(parse("latency"), []) == [("latency", 2000.0)]
    assert cli._latency_labels(parse("latency", "--rate", "300"), push) == [("latency", 300.0)]
    assert cli._latency_labels(parse("latency", "--rate", "2000,20000"), push) == [
        ("latency@2000", 2000.0),
        ("latency@20000", 20000.0),
    ]
    args = parse("latency", "--seconds", "60", "--stage-sample", "4", "--plot", "x.png", "--json")
    assert (args.duration, args.stage_sample, args.plot, args.json) == (60.0, 4, "x.png", True)


def _stage_cell(base: float) -> dict[str, float | int]:
    return {"count": 10, "p50": base, "p90": base * 2, "p99": base * 3, "p99.9": base * 4, "max": base * 5}


def test_latency_summary_takes_the_median_of_each_stage_cell() -> None:
    runs = [
        {
            "msgs_per_s": 2000.0,
            "target_rate": 2000.0,
            "offered_msgs_per_s": 1999.0,
            "store_to_handler": {"p50": 1.0 * k, "max": 9.0 * k},
            "stages": {"read_to_entered": _stage_cell(0.1 * k), "handler": _stage_cell(0.01 * k)},
            "client_over_100ms": k - 1,
            "missing": 0,
            "gc": {"max_ms": 0.5 * k},
        }
        for k in (1, 2, 3)
    ]
    s = summarize("latency@2000", "asyncio", "127.0.0.1:9876", runs)
    assert s["store_to_handler"] == {"p50": 2.0, "max": 18.0}
    assert s["stages"]["read_to_entered"]["p50"] == 0.2 and s["stages"]["handler"]["max"] == 0.1
    assert (s["client_over_100ms"], s["missing"], s["gc_max_ms"]) == (2, 0, 1.5)
    text = format_stage_table([s, summarize("push", "asyncio", "x", [{"msgs_per_s": 1.0}])])
    lines = text.splitlines()
    assert lines[0] == "latency@2000 / asyncio at 2,000 msgs/s, offered 1,999/s"
    assert lines[1].split() == ["stage", "(ms)", "p50", "p90", "p99", "p99.9", "max", "samples"]
    assert lines[3].startswith("store -> handler, every message  2.000")
    assert lines[4].split()[:4] == ["read", "->", "entered", "0.200"]
    assert "over 100 ms (socket read -> handler): 2" in lines[-1]
    assert format_stage_table([summarize("push", "asyncio", "x", [{"msgs_per_s": 1.0}])]) == ""


def test_latency_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``bench latency`` for 2 s at a low rate on the embedded cluster: the JSON summary carries
    store -> handler and every stage, non-negative and in order (nothing here asserts on speed)."""
    cdf = str(tmp_path / "cdf.png")
    args = parse("latency", "--rate", "100,200", "--seconds", "2", "--queues", "2", "--runs", "1",
                 "--loop", "asyncio", "--out", str(tmp_path), "--json", "--plot", cdf)  # fmt: skip
    assert cli.run(args) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # --json: the JSON lines only
    lines = [json.loads(ln) for ln in captured.out.splitlines()]
    assert [(x["scenario"], x["target_rate"]) for x in lines] == [
        ("latency@100", 100.0),
        ("latency@200", 200.0),
    ]
    stats = ("p50", "p90", "p99", "p99.9", "max")
    for x in lines:
        assert "errors" not in x and x["missing"] == 0 and x["client_over_100ms"] >= 0
        e2e = [x["store_to_handler"][k] for k in stats]
        assert e2e == sorted(e2e) and e2e[0] >= 0
        stages = x["stages"]
        assert {"store_to_read", "read_to_decoded", "queued_to_picked", "read_to_entered"} <= set(stages)
        for name, cell in stages.items():
            values = [cell[k] for k in stats]
            assert cell["count"] > 0 and values == sorted(values) and values[0] >= 0, (name, cell)
        # a later stage is never reached before an earlier one
        assert stages["read_to_entered"]["max"] >= stages["read_to_decoded"]["p50"]
        assert stages["read_to_last_entered"]["p50"] >= stages["read_to_entered"]["p50"]
    doc = json.loads((tmp_path / "result.json").read_text())
    run = doc["runs"]["latency@100/asyncio"][0]
    assert run["samples_client_ms"] == sorted(run["samples_client_ms"]) and run["gc"]["collections"] >= 0
    assert "read -> entered" in (tmp_path / "table.txt").read_text()
    plots = doc["plots"]
    if plots:  # matplotlib installed (the bench extra)
        assert (tmp_path / "latency_cdf.png").stat().st_size > 0 and (tmp_path / "cdf.png").exists()
