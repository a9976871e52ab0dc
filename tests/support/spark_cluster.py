"""The embedded cluster of the Spark tests, run in a child process and driven from a blocking portal
(Spark blocks the test thread): produce, read committed offsets, create topics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from rmq_async import ClientConfig, Message, Producer, SendResult, Timing
from rmq_async.embedded import EmbeddedCluster


@contextmanager
def cluster_in_portal(**kw: Any) -> Iterator[ClusterHandle]:
    """An embedded cluster in a child process (``EmbeddedCluster(process=True, **kw)``), driven from a
    blocking portal. At the end, portal tasks that a failed test left running (a ``portal.call`` its
    timeout interrupted) are cancelled: a module fixture's teardown must not wait for them forever."""
    with start_blocking_portal() as portal:
        cluster = EmbeddedCluster(process=True, **kw)
        try:
            with portal.wrap_async_context_manager(cluster):
                yield ClusterHandle(portal, cluster)
        finally:
            portal.call(portal.stop, True)


class ClusterHandle:
    def __init__(self, portal: BlockingPortal, cluster: EmbeddedCluster) -> None:
        self.portal = portal
        self.cluster = cluster
        self.namesrv = cluster.namesrv_addr

    def produce(self, topic: str, n: int, *, start: int = 0, size: int = 16, tags: str | None = None,
                body: Any = None) -> list[SendResult]:  # fmt: skip
        async def run() -> list[SendResult]:
            out = []
            async with Producer("spark_test_producer", namesrv_addr=self.namesrv) as p:
                for i in range(start, start + n):
                    data = body(i) if body else f"body-{i}-".encode().ljust(size, b".")
                    res = await p.send(Message(topic, data, tags=tags, keys=f"k-{i}"))
                    assert res is not None
                    out.append(res)
            return out

        return self.portal.call(run)

    def committed(self, group: str, topic: str, *, namespace: str | None = None) -> dict[int, int | None]:
        """The group's committed offset per queue id, as the broker reports it to a consumer (of
        ``namespace``, if given)."""
        from rmq_async.consumer.lite_pull import LitePullConsumer

        cfg = ClientConfig(namesrv_addr=self.namesrv, namespace=namespace, timing=Timing.fast())

        async def run() -> dict[int, int | None]:
            async with LitePullConsumer(group, client_config=cfg) as c:
                return {mq.queue_id: await c.committed(mq) for mq in await c.fetch_queues(topic)}

        return self.portal.call(run)

    def create_topic(self, topic: str, queues: int = 4) -> None:
        self.portal.call(self.cluster.create_topic, topic, queues)
