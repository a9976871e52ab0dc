"""QUERY_MESSAGE (12) by key on the embedded broker (``QueryMessageProcessor.queryMessage`` over the
index service), against the 4.9.8 capture ``acl/acl-query.jsonl`` (seq 23-26) for the request and
response fields, and the index rules: UNIQ_KEY and every KEYS entry, the time range, newest first,
maxNum capped at 64 (32 for ``_UNIQUE_KEY_QUERY``), 22 when nothing matches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmq_async.embedded import EmbeddedCluster
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.stored import decode_messages

from .rawclient import RawClient

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "acl" / "acl-query.jsonl"


def _frames() -> dict[int, Any]:
    return {d["seq"]: d for d in map(json.loads, CAPTURE.read_text().splitlines())}


def _ext(**kw: object) -> dict[str, str]:
    base = {"_UNIQUE_KEY_QUERY": "false", "beginTimestamp": "0", "endTimestamp": str((1 << 63) - 1)}
    base.update({k: str(v) for k, v in kw.items()})
    return base


async def test_query_by_key_and_uniq_key_answers_as_captured(broker: RawClient) -> None:
    frames = _frames()
    captured = frames[24]["header"]["extFields"]
    await broker.send("QT", b"one", keys="q-0 other", uniq="C00002022A555FFD2B27802C5E580000")
    await broker.send("QT", b"two", keys="q-1")
    resp = await broker.request(RequestCode.QUERY_MESSAGE, _ext(topic="QT", key="q-0", maxNum=32))
    assert resp.code == 0 and resp.remark is None
    assert list(resp.ext_fields) == list(captured)  # indexLastUpdatePhyoffset, indexLastUpdateTimestamp
    [m] = decode_messages(resp.body)
    assert m.body == b"one" and m.keys == "q-0 other"
    # every key of KEYS and the UNIQ_KEY are indexed (the tools' viewMessage by unique key)
    for key in ("other", "C00002022A555FFD2B27802C5E580000"):
        ext = _ext(topic="QT", key=key, maxNum=32, _UNIQUE_KEY_QUERY="true")
        [m] = decode_messages((await broker.request(RequestCode.QUERY_MESSAGE, ext)).body)
        assert m.body == b"one"


async def test_time_range_max_num_newest_first_and_not_found(broker: RawClient) -> None:
    for i in range(70):
        await broker.send("QR", b"m%d" % i, keys="same")
    resp = await broker.request(RequestCode.QUERY_MESSAGE, _ext(topic="QR", key="same", maxNum=100))
    msgs = decode_messages(resp.body)
    assert len(msgs) == 64  # maxMsgsNumBatch
    assert [m.body for m in msgs[:2]] == [b"m69", b"m68"]  # newest first, as the index's hash chain
    resp = await broker.request(RequestCode.QUERY_MESSAGE, _ext(topic="QR", key="same", maxNum=5))
    assert len(decode_messages(resp.body)) == 5
    resp = await broker.request(
        RequestCode.QUERY_MESSAGE, _ext(topic="QR", key="same", maxNum=100, _UNIQUE_KEY_QUERY="true")
    )
    assert len(decode_messages(resp.body)) == 32  # defaultQueryMaxNum for a unique-key query
    future = _ext(topic="QR", key="same", maxNum=5, beginTimestamp=(1 << 62))
    for ext in (future, _ext(topic="QR", key="absent", maxNum=5), _ext(topic="QT2", key="same", maxNum=5)):
        resp = await broker.request(RequestCode.QUERY_MESSAGE, ext)
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        assert resp.remark == "can not find message, maybe time range not correct"
        assert set(resp.ext_fields) == {"indexLastUpdatePhyoffset", "indexLastUpdateTimestamp"}


async def test_client_request_fields_as_the_java_client(cluster: EmbeddedCluster) -> None:
    # the capture's request (seq 23) without the ACL fields: the same keys in the same order
    from rmq_async.client.instance import ClientInstance
    from rmq_async.config import ClientConfig

    captured = dict(_frames()[23]["header"]["extFields"])
    for k in ("Signature", "AccessKey"):
        captured.pop(k)
    sent: list[dict[str, str]] = []
    async with ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr, timing=cluster.timing)) as c:
        call = c.api._call

        async def spy(addr: str, cmd, timeout: float, *, coalesce: bool = False):  # type: ignore[no-untyped-def]
            sent.append(dict(cmd.ext_fields))
            return await call(addr, cmd, timeout, coalesce=coalesce)

        c.api._call = spy  # type: ignore[method-assign]
        assert (
            await c.api.query_message(cluster.brokers[0].addr, "AclT", "q-0", 32, 0, (1 << 63) - 1, 3.0) == []
        )
    assert list(sent[0].items()) == list(captured.items())
