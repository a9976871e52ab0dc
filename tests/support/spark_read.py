"""The Spark source's executor read path, from a test's event loop: the blocking pulls of
``pipe.pull_range`` run in a worker thread (the embedded cluster serves in the test's loop)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from rmq_async.spark.bridge import Session
from rmq_async.spark.columns import Chunk
from rmq_async.spark.offsets import Range
from rmq_async.spark.pipe import BrokerSocket, pull_range


async def pull_chunks(s: Session, opts: Any, r: Range, depth: int = 4) -> list[Chunk]:
    """The undecoded bodies of ``r``, as an executor pulls them; every connection closed after."""
    addr = await s._addr((r.topic, r.broker_name, r.queue_id))
    conns: list[BrokerSocket] = []

    def connect() -> BrokerSocket:
        conns.append(s.open_socket(addr))
        return conns[-1]

    def pull_all() -> list[Chunk]:
        gen = pull_range(
            connect, lambda c: c.close(), s.template(r), r, depth=depth, batch=opts.pull_batch_size,
            filtered=s.sub_string != "*", fail_on_data_loss=opts.fail_on_data_loss, warn=lambda w: None,
        )  # fmt: skip
        try:
            return [c for got in gen for c in got]
        finally:
            for c in conns:
                c.close()

    return await anyio.to_thread.run_sync(pull_all)
