"""The name server on its own: registration, expiry, unregistration, crc check."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import NameServer

from .rawclient import RawClient


@pytest.fixture
async def ns() -> AsyncIterator[NameServer]:
    server = NameServer(Timing.fast(broker_expiry=0.3))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _register(name: str, addr: str, topics: dict[str, int], counter: int = 1) -> tuple[dict[str, str], bytes]:
    table = {
        t: {
            "order": False,
            "perm": 6,
            "readQueueNums": n,
            "topicFilterType": "SINGLE_TAG",
            "topicName": t,
            "topicSysFlag": 0,
            "writeQueueNums": n,
        }
        for t, n in topics.items()
    }
    wrapper = {"dataVersion": {"counter": counter, "timestamp": 1}, "topicConfigTable": table}
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper}).encode()
    ext = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": "C",
        "haServerAddr": addr,
        "brokerId": "0",
        "compressed": "false",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
    }
    return ext, body


async def test_register_route_unregister(ns: NameServer) -> None:
    async with RawClient(ns.addr) as reg, RawClient(ns.addr) as cli:
        ext, body = _register("bk-1", "127.0.0.1:1111", {"NsT": 2})
        r = await reg.request(103, ext, body)
        assert r.code == 0 and r.ext_fields_present
        ext2, body2 = _register("bk-2", "127.0.0.1:2222", {"NsT": 3})
        assert (await reg.request(103, ext2, body2)).code == 0
        route = json.loads((await cli.request(105, {"topic": "NsT"})).body)
        assert [b["brokerName"] for b in route["brokerDatas"]] == ["bk-1", "bk-2"]
        assert [q["readQueueNums"] for q in route["queueDatas"]] == [2, 3]
        r = await reg.request(
            104, {"brokerName": "bk-1", "brokerAddr": "127.0.0.1:1111", "clusterName": "C", "brokerId": "0"}
        )
        assert r.code == 0 and not r.ext_fields_present
        route = json.loads((await cli.request(105, {"topic": "NsT"})).body)
        assert [b["brokerName"] for b in route["brokerDatas"]] == ["bk-2"]
        bad = dict(ext, bodyCrc32="12345")
        r = await reg.request(103, bad, body)
        assert (r.code, r.remark) == (1, "crc32 not match")
        assert (await cli.request(106)).code == 0
        assert (await cli.request(777)).code == 3


async def test_expiry_and_connection_close(ns: NameServer) -> None:
    async with RawClient(ns.addr) as cli:
        async with RawClient(ns.addr) as reg:
            ext, body = _register("bk-x", "127.0.0.1:3333", {"Gone": 1})
            await reg.request(103, ext, body)
            assert (await cli.request(105, {"topic": "Gone"})).code == 0
        await asyncio.sleep(0.05)  # the registering connection closed: the broker is dropped
        assert (await cli.request(105, {"topic": "Gone"})).code == 17
        async with RawClient(ns.addr) as reg:
            ext, body = _register("bk-y", "127.0.0.1:4444", {"Expire": 1})
            await reg.request(103, ext, body)
            assert (await cli.request(105, {"topic": "Expire"})).code == 0
            await asyncio.sleep(0.35)
            ns.scan_not_active()  # what the periodic scan does after broker_expiry
            assert (await cli.request(105, {"topic": "Expire"})).code == 17
