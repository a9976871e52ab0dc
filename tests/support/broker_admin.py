"""Offsets straight on a broker (as an admin tool or another member would set them), for tests."""

from __future__ import annotations

from rmq_async.embedded.outbound import Outbound
from rmq_async.protocol.codes import RequestCode
from rmq_async.protocol.command import RemotingCommand

__all__ = ["commit_offset", "query_offset"]


async def commit_offset(addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
    """A sync UPDATE_CONSUMER_OFFSET straight to the broker, as an admin tool would send it."""
    out = Outbound(addr)
    try:
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
        resp = await out.request(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext), 3.0)
        assert resp is not None and resp.code == 0, resp
    finally:
        await out.close()


async def query_offset(addr: str, group: str, topic: str, queue_id: int) -> int:
    """The broker's committed offset of the queue, -1 when it has none."""
    out = Outbound(addr)
    try:
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        resp = await out.request(RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, ext), 3.0)
        assert resp is not None
        return int(resp.ext_fields["offset"]) if resp.code == 0 else -1
    finally:
        await out.close()
