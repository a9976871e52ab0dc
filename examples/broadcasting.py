"""Broadcasting: every member of the group gets every message; offsets are kept in a local file.

python examples/broadcasting.py               # embedded cluster, two members
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile

from rmq_async import ConsumeContext, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from rmq_async.embedded import EmbeddedCluster

TOPIC, GROUP, COUNT = "BroadcastDemo", "broadcast_demo_group", 50


async def main() -> dict[str, int]:
    async with EmbeddedCluster() as cluster:
        async with Producer("bc_producer", namesrv_addr=cluster.namesrv_addr) as p:
            for i in range(COUNT):
                await p.send(Message(TOPIC, f"news {i}".encode(), keys=f"k-{i}"))
        seen: dict[str, set[str]] = {"member-1": set(), "member-2": set()}
        done = {name: asyncio.Event() for name in seen}

        def handler_for(name: str):  # type: ignore[no-untyped-def]
            async def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
                seen[name].update(m.keys or m.msg_id for m in msgs)
                if len(seen[name]) >= COUNT:
                    done[name].set()
                return ConsumeResult.SUCCESS

            return handler

        with tempfile.TemporaryDirectory() as offsets:
            members = [
                PushConsumer(
                    GROUP,
                    namesrv_addr=cluster.namesrv_addr,
                    handler=handler_for(name),
                    subscriptions={TOPIC: "*"},
                    message_model="BROADCASTING",
                    consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                    offset_store_dir=offsets,
                    instance_name=name,
                )
                for name in seen
            ]
            for m in members:
                await m.start()
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in done.values())), 60)
            for m in members:
                await m.stop()
        return {name: len(keys) for name, keys in seen.items()}


if __name__ == "__main__":
    result = asyncio.run(main())
    print(json.dumps(result))
    sys.exit(0 if all(v == COUNT for v in result.values()) else 1)
