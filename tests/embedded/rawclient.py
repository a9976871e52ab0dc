"""A test-only raw remoting client for the embedded broker, built on FrameDecoder.

Requests are built from RemotingCommand with ext fields shaped as the Java client sends them (see
the captures); server-initiated requests (40, 307, 309, 220, 221) are queued in ``server_requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rmq_async.protocol.codes import SerializeType
from rmq_async.protocol.command import FrameDecoder, RemotingCommand

__all__ = ["RawClient", "StoredMsg", "call", "decode_messages", "props_string"]


class RawClient:
    def __init__(self, addr: str, *, version: int = 409) -> None:
        self.addr = addr
        self.version = version
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.server_requests: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.responses_seen: list[RemotingCommand] = []
        self.opaques = itertools.count(1)
        self.task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    async def __aenter__(self) -> RawClient:
        host, _, port = self.addr.rpartition(":")
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        self.task = asyncio.get_running_loop().create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _read(self) -> None:
        dec = FrameDecoder()
        assert self.reader is not None
        try:
            while True:
                data = await self.reader.read(1 << 16)
                if not data:
                    break
                for cmd in dec.feed(data):
                    if cmd.is_response:
                        self.responses_seen.append(cmd)
                        fut = self.pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                    else:
                        self.server_requests.put_nowait(cmd)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.set()
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("closed"))

    def send_raw(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)

    async def request(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        wait: float = 3.0,
        serialize: SerializeType = SerializeType.JSON,
        oneway: bool = False,
        version: int | None = None,
    ) -> RemotingCommand:
        cmd = RemotingCommand.request(
            code,
            ext,
            body,
            oneway=oneway,
            serialize_type=serialize,
            language="JAVA",
            version=self.version if version is None else version,
        )
        cmd.opaque = next(self.opaques)
        assert self.writer is not None
        if oneway:
            self.writer.write(cmd.encode())
            await self.writer.drain()
            return cmd
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        self.writer.write(cmd.encode())
        return await asyncio.wait_for(fut, wait)

    def reply(
        self, req: RemotingCommand, code: int = 0, body: bytes = b"", remark: str | None = None
    ) -> None:
        resp = req.make_response(code, remark, None, body)
        assert self.writer is not None
        self.writer.write(resp.encode())

    async def next_server_request(self, wait: float = 3.0) -> RemotingCommand:
        return await asyncio.wait_for(self.server_requests.get(), wait)

    # -- typed helpers (shapes copied from the captures) ------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | None = None,
        props: dict[str, str] | None = None,
        group: str = "test_pg",
        uniq: str | None = None,
        queues: int = 4,
        reconsume_times: int = 0,
        max_reconsume: int | None = None,
        **kw: Any,
    ) -> RemotingCommand:
        p: dict[str, str] = {}
        if keys:
            p["KEYS"] = keys
        p.update(props or {})
        p["UNIQ_KEY"] = uniq or f"{int(time.time_ns()):032X}"
        p["WAIT"] = "true"
        if tags:
            p["TAGS"] = tags
        ext = {
            "a": group,
            "b": topic,
            "c": "TBW102",
            "d": str(queues),
            "e": str(queue_id),
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": props_string(p),
            "j": str(reconsume_times),
            "k": "false",
            "m": "false",
            "n": "broker-a",
        }
        if max_reconsume is not None:
            ext["l"] = str(max_reconsume)
        return await self.request(310, ext, body, **kw)

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_nums: int = 32,
        sys_flag: int = 0,
        suspend_ms: int = 1000,
        sub_version: int = 0,
        subscription: str | None = None,
        commit_offset: int = 0,
        wait: float = 3.0,
        **kw: Any,
    ) -> RemotingCommand:
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(sys_flag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms),
            "subVersion": str(sub_version),
            "expressionType": "TAG",
            "bname": "broker-a",
        }
        if subscription is not None:
            ext["subscription"] = subscription
        return await self.request(11, ext, wait=wait, **kw)

    async def heartbeat(
        self,
        client_id: str,
        group: str,
        subs: dict[str, str],
        *,
        model: str = "CLUSTERING",
        version: int = 1,
    ) -> RemotingCommand:
        sub_set = []
        for topic, expr in subs.items():
            tags = [] if expr == "*" else [t.strip() for t in expr.split("||")]
            sub_set.append(
                {
                    "classFilterMode": False,
                    "codeSet": [java_hash(t) for t in tags],
                    "expressionType": "TAG",
                    "subString": expr,
                    "subVersion": version,
                    "tagsSet": tags,
                    "topic": topic,
                }
            )
        body = {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": group,
                    "messageModel": model,
                    "subscriptionDataSet": sub_set,
                    "unitMode": False,
                }
            ],
            "producerDataSet": [],
        }
        return await self.request(34, None, json.dumps(body).encode())


def java_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def props_string(p: dict[str, str]) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in p.items())


@dataclass(repr=False)
class StoredMsg:
    """A stored message decoded the long way (independent of the broker's code)."""

    total: int
    magic: int
    crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys: int
    sys_flag: int
    born_ts: int
    born: bytes
    store_ts: int
    store_host: bytes
    reconsume: int
    body: bytes
    topic: str
    props: dict[str, str]
    props_text: str
    msg_id: str

    def __repr__(self) -> str:
        return f"StoredMsg({self.__dict__!r})"


def decode_messages(body: bytes) -> Iterator[StoredMsg]:
    pos = 0
    while pos < len(body):
        total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = struct.unpack_from(
            ">iiiiiqqiq", body, pos
        )
        p = pos + 48
        born = body[p : p + 8]
        p += 8
        (store_ts,) = struct.unpack_from(">q", body, p)
        p += 8
        store_host = body[p : p + 8]
        p += 8
        reconsume, _prepared = struct.unpack_from(">iq", body, p)
        p += 12
        (blen,) = struct.unpack_from(">i", body, p)
        p += 4
        mbody = body[p : p + blen]
        p += blen
        tlen = body[p]
        topic = body[p + 1 : p + 1 + tlen].decode()
        p += 1 + tlen
        (plen,) = struct.unpack_from(">h", body, p)
        props_text = body[p + 2 : p + 2 + plen].decode()
        props = dict(item.split("\x01", 1) for item in props_text.split("\x02") if item)
        yield StoredMsg(
            total=total,
            magic=magic,
            crc=crc,
            queue_id=qid,
            flag=flag,
            queue_offset=qoff,
            phys=phys,
            sys_flag=sysflag,
            born_ts=born_ts,
            born=born,
            store_ts=store_ts,
            store_host=store_host,
            reconsume=reconsume,
            body=mbody,
            topic=topic,
            props=props,
            props_text=props_text,
            msg_id=(store_host + struct.pack(">q", phys)).hex().upper(),
        )
        pos += total


async def call(client: RawClient, cmd: RemotingCommand, *, wait: float = 5.0) -> RemotingCommand | None:
    """Send a ready-made command (its own opaque is replaced); None for a oneway."""
    cmd.opaque = next(client.opaques)
    assert client.writer is not None
    if cmd.is_oneway:
        client.writer.write(cmd.encode())
        await client.writer.drain()
        return None
    fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    client.pending[cmd.opaque] = fut
    client.writer.write(cmd.encode())
    return await asyncio.wait_for(fut, wait)
