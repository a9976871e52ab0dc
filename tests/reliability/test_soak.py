"""A 3-minute profile of the soak: churn and faults, nothing lost, no task or process-queue growth.

Strategy: the soak engine of ``rmq-async bench soak`` (:mod:`rmq_async.bench.soak`) as it is, shorter:
2 embedded brokers + name server in a child process (brokers behind cut proxies), a producer at 500
msgs/s, three groups (concurrent, orderly, POP) of member processes that join, leave gracefully, or
are SIGKILLed and replaced every 20 s, a fault every 45 s (connections cut, broker-a restarted on its
data dir, a name server outage), handlers that fail 1 %, hang past the consume timeout 0.1 % and take
0-5 ms. Checked: every acknowledged send was consumed (lost 0), no orderly member consumed a message
for the first time after one at a higher offset of its queue (replays from the committed offset,
after a lease ended, are in order and allowed), and the members that live through the whole run (one
anchor per kind, which see every rebalance) hold no process queue beyond the queues they own and end
with no more asyncio tasks than they had early on. The one-hour run's figures are in
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest

from rmq_async.bench.soak import KINDS, Soak, SoakConfig

pytestmark = [pytest.mark.slow, pytest.mark.reliability]


@pytest.mark.timeout(420)
def test_soak_three_minutes_of_churn_and_faults(tmp_path: Path) -> None:
    cfg = SoakConfig(
        duration=180, rate=500, change_every=20, fault_every=45, drain=45, sample_every=5, out=str(tmp_path)
    )
    soak = Soak(cfg)
    summary = asyncio.run(soak.run())
    print(summary)
    assert summary["sent"] >= 0.8 * cfg.rate * cfg.duration, summary
    assert summary["lost"] == 0, summary
    assert summary["order_violations"] == 0, summary
    assert summary["send_failed"] == 0, summary
    assert all(summary["changes"][k] >= 1 for k in ("join", "leave", "kill")), summary["changes"]
    assert set(summary["faults"]) == {"cut", "restart", "nsdown"}, summary["faults"]

    samples = soak.samples
    assert len(samples) >= cfg.duration / cfg.sample_every - 2
    queues_per_topic = {"concurrent": 2 * cfg.queues, "orderly": 2 * cfg.queues, "pop": 0}
    for kind in KINDS:
        name = f"{kind}-anchor"
        series = [s["members"][name] for s in samples if name in s["members"]]
        assert len(series) >= len(samples) - 2, name
        # process queues: only the owned queues and the retry topic's (2 brokers: 2 retry queues)
        for m in series:
            assert m["pq"] <= m["owned"] + m["retry_queues"], (name, m)
            assert m["pq"] <= queues_per_topic[kind] + 2, (name, m)
        # tasks: no growth across the membership changes (medians of the first and last thirds)
        third = len(series) // 3
        early = statistics.median(m["tasks"] for m in series[:third])
        late = statistics.median(m["tasks"] for m in series[-third:])
        assert late <= early + 10, (name, early, late)
        assert series[-1]["fds"] <= series[0]["fds"] + 5, (name, series[0]["fds"], series[-1]["fds"])
