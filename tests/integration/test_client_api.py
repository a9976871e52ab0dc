"""The client's typed RPCs against the embedded broker: long polling wakes early, locks."""

from __future__ import annotations

import fcntl
import socket
import struct
import time

import anyio
import pytest

from rmq_async import Message, MessageQueue, Producer, PullStatus, Timing
from rmq_async.client.instance import ClientInstance, local_ip
from rmq_async.config import ClientConfig
from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol import headers as H
from rmq_async.protocol.codes import PullSysFlag


async def test_held_pull_is_answered_by_a_send(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    mq = MessageQueue(topic, cluster.brokers[0].name, 0)
    async with (
        ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)) as ci,
        Producer("p", namesrv_addr=cluster.namesrv_addr) as p,
    ):
        await ci.update_route(topic)
        addr = await ci.master_addr(mq.broker_name)
        header = H.PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=0,
            queue_offset=0,
            max_msg_nums=32,
            sys_flag=PullSysFlag.build(commit_offset=False, suspend=True, subscription=True),
            commit_offset=0,
            suspend_timeout_millis=10_000,  # far longer than the test may wait
            sub_version=0,
            subscription="*",
            expression_type="TAG",
            bname=mq.broker_name,
        )
        got: list[float] = []

        async def pull() -> None:
            res = await ci.api.pull(addr, header, 15.0, broker_name=mq.broker_name)
            assert res.status is PullStatus.FOUND and res.messages[0].body == b"wake"
            got.append(time.perf_counter())

        async with anyio.create_task_group() as tg:
            tg.start_soon(pull)
            await anyio.sleep(0.2)  # let the pull be held
            t0 = time.perf_counter()
            await p.send(Message(topic, b"wake"), queue=mq)
        assert got and got[0] - t0 < 1.0


async def test_locks_one_holder_and_expiry(names: tuple[str, str]) -> None:
    topic, group = names
    timing = Timing.fast(lock_renew_interval=0.2, lock_lease=0.3, broker_lock_expiry=0.6)
    async with EmbeddedCluster(timing=timing) as cluster:
        await cluster.create_topic(topic, queues=2)
        mq = MessageQueue(topic, cluster.brokers[0].name, 0)
        cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=timing)
        async with ClientInstance(cfg, instance_name="a") as a, ClientInstance(cfg, instance_name="b") as b:
            await a.update_route(topic)
            addr = await a.master_addr(mq.broker_name)
            assert await a.api.lock_batch_mq(addr, group, a.client_id, [mq], 3) == {mq}
            assert await b.api.lock_batch_mq(addr, group, b.client_id, [mq], 3) == set()
            await a.api.unlock_batch_mq(addr, group, a.client_id, [mq], 3)
            assert await b.api.lock_batch_mq(addr, group, b.client_id, [mq], 3) == {mq}
            # b stops renewing: after the broker's expiry a may take it
            with anyio.fail_after(5):
                while await a.api.lock_batch_mq(addr, group, a.client_id, [mq], 3) != {mq}:  # noqa: ASYNC110
                    await anyio.sleep(0.1)


# -- client id: the IP is the host name's address, often loopback --------------------------------


def _ipv4_of_interfaces() -> list[str]:
    out = []
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            out.append(socket.inet_ntoa(raw[20:24]))
    return out


def test_client_ip_is_not_loopback_when_the_host_has_another_address() -> None:
    """Java ``ClientConfig.clientIP`` = ``RemotingUtil.getLocalAddress()``: the first non-loopback IPv4
    of the network interfaces (skipping 127.0.* and 192.168.* when another exists). instance.py
    ``local_ip`` resolves the host name, which /etc/hosts maps to 127.0.0.1 or 127.0.1.1 on many hosts:
    every member on such hosts gets the id ``127.0.x.1@<instance>``. With an explicit instance name
    (the same on every host) the ids collide, the broker lists one id twice, both members compute the
    same share, and the other share is never consumed; admin tools cannot tell the members apart."""
    others = [a for a in _ipv4_of_interfaces() if not a.startswith("127.")]
    if not others:
        pytest.skip("this host has no non-loopback IPv4 address")
    assert local_ip() in others, f"client ip {local_ip()!r}, but the host has {others}"
