"""Broker and name server faults during consumption: restart, long outage, cut connections, delayed
responses, a half-open peer (through the fault proxy), the name server away.

Strategy: each scenario owns an embedded cluster on the fast profile, produces keyed messages around
the fault, consumes with one push consumer recording into a :class:`Ledger`, and ends with
``ledger.record()`` (lost must be 0). Faults are timed against ``Timing.fast()`` periods, not sleeps
chosen by feel; waits are on the ledger's events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq_async import ClientConfig, Producer, Timing
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import RequestCode

from .proxy import FaultProxy
from .scenario import SCALE, Ledger, consumer, n_msgs, produce


async def test_broker_restarted_on_same_data_dir_mid_stream(
    tmp_path: Path, names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(300)
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, data_dir=tmp_path) as cluster:
        await produce(cluster.namesrv_addr, topic, n, ledger)
        gate = anyio.Event()

        async def handler(msgs, ctx):  # type: ignore[no-untyped-def]
            if ledger.unique >= n // 3:
                await gate.wait()  # hold the stream mid-way: the restart happens under load
            return await ledger.handler(msgs, ctx)

        async with consumer(cluster.namesrv_addr, group, topic, handler, timing):
            await ledger.wait_count(n // 3, 20)
            for _ in range(SCALE):
                await cluster.stop_broker(0)
                await cluster.start_broker(0)
            gate.set()
            ledger.mark_fault_end()
            await produce(cluster.namesrv_addr, topic, n, ledger, start=n)
            await ledger.wait_all(30)
    ledger.record(restarts=SCALE)


async def test_one_of_two_brokers_down_past_a_rebalance(
    names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(200)
    async with EmbeddedCluster(brokers=2, queues=4, timing=timing) as cluster:
        await produce(cluster.namesrv_addr, topic, n, ledger)
        async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing):
            await ledger.wait_all(20)
            await cluster.stop_broker(1)
            # the other broker keeps serving while b is away for several rebalance periods
            during_sent = len(ledger.sent)
            await produce(cluster.namesrv_addr, topic, n, ledger, start=n)
            await ledger.wait_count(len(ledger.sent), 20)
            assert ledger.unique == len(ledger.sent) > during_sent
            with anyio.move_on_after(3 * timing.rebalance_interval * SCALE):
                await anyio.Event().wait()  # the outage itself: nothing to await but time
            await cluster.start_broker(1)
            ledger.mark_fault_end()
            await produce(cluster.namesrv_addr, topic, n, ledger, start=2 * n)
            await ledger.wait_all(30)
    ledger.record(outage_s=3 * timing.rebalance_interval * SCALE)


async def test_connections_cut_repeatedly_during_consumption(
    names: tuple[str, str], ledger: Ledger, timing: Timing, transport: dict[str, Any]
) -> None:
    topic, group = names
    n = n_msgs(400)
    rounds = 6 * SCALE
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing, **transport) as cluster:
        await produce(cluster.namesrv_addr, topic, n, ledger)
        slow = anyio.Event()

        async def handler(msgs, ctx):  # type: ignore[no-untyped-def]
            with anyio.move_on_after(0.005):
                await slow.wait()  # a little work per message, so cuts land mid-stream
            return await ledger.handler(msgs, ctx)

        async with consumer(cluster.namesrv_addr, group, topic, handler, timing, concurrency=4):
            await ledger.wait_count(1, 20)
            for i in range(rounds):
                cluster.brokers[0].cut_connections()
                await ledger.wait_count(min(n, (i + 2) * n // (rounds + 2)), 20)
            ledger.mark_fault_end()
            await ledger.wait_all(30)
    ledger.record(cuts=rounds)


async def test_responses_delayed_past_the_request_timeout(
    names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(200)
    async with EmbeddedCluster(brokers=1, queues=2, timing=timing) as cluster:
        await produce(cluster.namesrv_addr, topic, n, ledger)
        broker = cluster.brokers[0]
        async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing, pull_batch_size=8):
            await ledger.wait_count(8, 20)
            # every pull answer now comes after the pull timeout: the client gives up on each
            broker.faults.delay(RequestCode.PULL_MESSAGE, timing.pull_timeout + 0.5)
            with anyio.move_on_after(2 * timing.pull_timeout * SCALE):
                await anyio.Event().wait()
            stalled_at = ledger.unique
            broker.faults.clear()
            ledger.mark_fault_end()
            await ledger.wait_all(30)
    ledger.record(consumed_while_delayed=stalled_at)


@pytest.mark.slow  # a long fault scenario; .ci/run's `-m slow` step runs it
async def test_half_open_broker_connection(
    names: tuple[str, str],
    ledger: Ledger,
    timing: Timing,
    transport: dict[str, Any],
) -> None:
    topic, group = names
    n = n_msgs(200)
    async with EmbeddedCluster(brokers=1, queues=2, timing=timing, **transport) as cluster:
        port = cluster.brokers[0].port
        async with FaultProxy(f"127.0.0.1:{port}") as proxy:
            cluster.advertise(0, proxy.addr)  # clients reach the broker through the proxy
            await cluster.stop_broker(0)
            await cluster.start_broker(0)  # registers the proxy's address with the name server
            await produce(cluster.namesrv_addr, topic, n, ledger)
            async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing):
                await ledger.wait_count(n, 20)
                proxy.stall()  # no FIN, no RST, nothing: the peer just stops answering
                with anyio.move_on_after(2 * timing.pull_timeout * SCALE):
                    await anyio.Event().wait()
                links_before = proxy.accepted
                proxy.clear()
                ledger.mark_fault_end()
                await produce(cluster.namesrv_addr, topic, n, ledger, start=n)
                await ledger.wait_all(30)
            reconnected = proxy.accepted - links_before
    ledger.record(new_links_after=reconnected)


async def test_name_server_unreachable_for_a_while(
    names: tuple[str, str], ledger: Ledger, timing: Timing
) -> None:
    topic, group = names
    n = n_msgs(100)
    async with EmbeddedCluster(brokers=1, queues=4, timing=timing) as cluster:
        await produce(cluster.namesrv_addr, topic, n, ledger)
        async with consumer(cluster.namesrv_addr, group, topic, ledger.handler, timing):
            await ledger.wait_all(20)
            cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
            async with Producer("rel_producer_cached", client_config=cc) as p:
                await p.publish_info(topic)  # the route is cached while the name server is up
                await cluster.stop_namesrv()
                # cached routes keep working: the started producer sends, the consumer consumes
                await produce(cluster.namesrv_addr, topic, n, ledger, start=n, producer=p)
                await ledger.wait_all(20)
                with anyio.move_on_after(2 * timing.route_refresh_interval * SCALE):
                    await anyio.Event().wait()  # route refreshes and heartbeats' lookups fail meanwhile
                await produce(cluster.namesrv_addr, topic, n, ledger, start=2 * n, producer=p)
                await ledger.wait_all(20)
                await cluster.start_namesrv()
                await cluster.brokers[0].register()  # the new name server knows nothing until then
                ledger.mark_fault_end()
                await produce(cluster.namesrv_addr, topic, n, ledger, start=3 * n, producer=p)
            await produce(cluster.namesrv_addr, topic, n, ledger, start=4 * n)  # a new client: recovery
            await ledger.wait_all(30)
    ledger.record(namesrv_outage_s=2 * timing.route_refresh_interval * SCALE)
