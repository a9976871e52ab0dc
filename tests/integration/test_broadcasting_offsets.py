"""Broadcasting consumers and their local offsets file: an unwritable directory, the offset a
PULL_OFFSET_MOVED corrected to, and the Java client's offsets.json format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from support.integration import Collector, alive_until, consumer, produce, until

from rmq_async import Timing
from rmq_async.client.instance import build_client_id
from rmq_async.consumer.offset_store import LocalFileOffsetStore
from rmq_async.embedded import EmbeddedCluster
from rmq_async.internals import internals
from rmq_async.protocol.codes import RequestCode, ResponseCode
from rmq_async.protocol.mq import MessageQueue

# -- broadcasting: an offsets file that cannot be written stops the whole consumer ------------------


async def test_unwritable_offset_dir_does_not_stop_a_broadcasting_consumer(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing
) -> None:
    """offset_store.py LocalFileOffsetStore.persist_all/_write: an OSError (read-only or full disk,
    permissions) is not caught by ``PushConsumer._persist_loop`` (nor by ``drop_queue``, which catches
    only RocketMQError), so the first timer tick kills the consumer's task group. Java's
    ``LocalFileOffsetStore.persistAll`` logs the IOException and the consumer keeps consuming."""
    topic, group = names
    # a directory nobody may create anything in (sysfs refuses mkdir even to root); reading a missing
    # offsets file there is fine, so the consumer starts
    base = Path("/sys") / f"rmq-review-{os.getpid()}"
    try:
        base.mkdir()
    except OSError:
        pass
    else:  # pragma: no cover - not Linux sysfs
        base.rmdir()
        pytest.skip("no unwritable directory available")
    await cluster.create_topic(topic, queues=1)
    col = Collector()
    async with consumer(
        cluster, group, topic, col, timing, message_model="BROADCASTING", offset_store_dir=str(base)
    ) as c:
        await produce(cluster.namesrv_addr, topic, 5)
        await alive_until(c, lambda: col.wait_unique(5))
        # let the persist timer run a few times (each tick tries to write the offsets file)
        await alive_until(c, lambda: anyio.sleep(timing.persist_interval * 6))
        await produce(cluster.namesrv_addr, topic, 5, start=5)
        await alive_until(c, lambda: col.wait_unique(10))


# -- broadcasting: the offset a PULL_OFFSET_MOVED corrected to is forgotten -------------------------


async def test_broadcasting_offset_illegal_keeps_the_corrected_offset(
    cluster: EmbeddedCluster,
    names: tuple[str, str],
    timing: Timing,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pulling.py OFFSET_ILLEGAL -> push.py drop_queue(mq, offset=next_begin): the corrected offset is
    written to the table and file, then ``offset_store.remove(mq)`` deletes it from the memory table,
    which is all ``LocalFileOffsetStore.read_store`` reads. The re-added queue therefore starts from
    ``consume_from_where`` instead of the corrected offset: with CONSUME_FROM_LAST_OFFSET every message
    stored between the correction and the re-add is skipped (never consumed). Java's
    ``LocalFileOffsetStore.removeOffset`` is a no-op for this reason."""
    topic, group = names
    await cluster.create_topic(topic, queues=1)
    await produce(cluster.namesrv_addr, topic, 10)  # offsets 0..9
    broker = cluster.brokers[0]
    mq = MessageQueue(topic, broker.name, 0)
    col = Collector()
    starts: list[int] = []  # the start offset of each (re)start of the queue

    def on_assigned(t: str, mqs: set[MessageQueue]) -> None:
        if mq in mqs:
            starts.append(internals(c).queues[mq].next_offset)

    c = consumer(
        cluster,
        group,
        topic,
        col,
        # only the rebalances the consumer asks for itself (no timer between the steps below)
        Timing.fast(rebalance_interval=600.0),
        message_model="BROADCASTING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        offset_store_dir=str(tmp_path),
        instance_name="review",
        on_assigned=on_assigned,
    )
    path = LocalFileOffsetStore(tmp_path, build_client_id(c.client_config, "review"), group).path
    path.parent.mkdir(parents=True)
    # a stored offset past the queue's end: the first pull is answered PULL_OFFSET_MOVED, next 10
    rows = [{"topic": topic, "brokerName": broker.name, "queueId": 0, "offset": 50}]
    path.write_text(json.dumps({"offsets": rows}))
    # the broker cannot answer GET_MAX_OFFSET for a while: a queue that must start from
    # CONSUME_FROM_LAST_OFFSET cannot be (re)started until then
    broker.faults.refuse(RequestCode.GET_MAX_OFFSET, ResponseCode.SYSTEM_ERROR, "review: not now")
    async with c:
        refused = f"cannot compute the start offset of {mq}"

        def settled() -> bool:
            # started at 50, dropped by the correction, then either restarted (from the corrected
            # offset) or refused a start offset by the broker
            return len(starts) >= 2 or any(refused in r.getMessage() for r in caplog.records)

        await alive_until(c, lambda: until(settled))
        assert starts[0] == 50
        await produce(cluster.namesrv_addr, topic, 5, start=10)  # offsets 10..14
        broker.faults.clear()
        c.rebalance_now()
        committed = internals(c).ctx.offset_store.read_memory
        await alive_until(c, lambda: until(lambda: mq in internals(c).queues and committed(mq) >= 15))
        missing = sorted({f"k-{i}" for i in range(10, 15)} - set(col.seen))
        assert not missing, (
            f"queue restarted at {starts[1:]} instead of the corrected offset 10: "
            f"{missing} were never consumed"
        )


# -- broadcasting: the offset file is not the Java client's format ---------------------------------


async def test_local_offset_file_reads_the_java_format(tmp_path: Path) -> None:
    """Java ``LocalFileOffsetStore`` keeps ``<dir>/<client id>/<group>/offsets.json`` as
    ``OffsetSerializeWrapper.toJson``: fastjson with MessageQueue objects as map keys
    (``{"offsetTable":{{"brokerName":..,"queueId":0,"topic":..}:5}}``). rmq_async uses the same path
    but its own ``{"offsets":[...]}`` rows, and reads a Java file as "unreadable": a broadcasting group
    moved from Java to rmq_async (or back) restarts every queue from consume_from_where (re-consumes
    everything, or skips what arrived meanwhile)."""
    cid, group = "127.0.0.1@DEFAULT", "review_bcast_group"
    path = tmp_path / cid / group / "offsets.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"ReviewBcast"}:5,'
        '{"brokerName":"broker-a","queueId":1,"topic":"ReviewBcast"}:7}}',
        encoding="utf-8",
    )
    store = LocalFileOffsetStore(tmp_path, cid, group)
    await store.load()
    got = {mq.queue_id: off for mq, off in store.snapshot().items()}
    assert got == {0: 5, 1: 7}, f"a Java offsets.json was read as {got}"
