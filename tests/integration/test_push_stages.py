"""The stage recorder (``stage_sample``) on a push consumer against the embedded cluster: every
sampled batch's stamps are in the order a message goes through them, the broker's part included."""

from __future__ import annotations

import pytest
from support.integration import Collector, consumer, produce

from rmq_async import Timing
from rmq_async.consumer.stages import INTERVALS
from rmq_async.embedded import EmbeddedCluster
from rmq_async.transport import reads_stamped

_ORDER = ("read", "decoded", "queued", "picked", "entered", "returned", "settled")


@pytest.mark.parametrize("plain", [False, True], ids=["async-handler", "plain-handler"])
async def test_every_sampled_batch_is_stamped_in_order(
    cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing, plain: bool
) -> None:
    # a plain handler is called by the pulling task: no worker, the same stamps in the same order
    topic, group = names
    col = Collector()
    handler = col.plain() if plain else col
    async with consumer(cluster, group, topic, handler, timing, stage_sample=1) as c:
        await produce(cluster.namesrv_addr, topic, 40)
        await col.wait_unique(40)
        stages = c.stages
        assert stages is not None and reads_stamped()
    samples = stages.samples  # stopped: every batch taken was finished and acknowledged
    assert not reads_stamped()  # the pull loops stopped asking for read stamps
    assert sum(s.count for s in samples) >= 40
    for s in samples:
        stamps = [s.stamp(stage) for stage in _ORDER]
        assert all(stamps) and stamps == sorted(stamps), s.as_dict()
        assert s.entered <= s.last_entered and s.decoded < s.next_pull
        assert s.stamp("store") <= s.read + 1_000_000  # (store_ms is a whole millisecond)
    summary = stages.summary()
    assert set(summary) == set(INTERVALS)
    for cell in summary.values():
        assert cell["count"] == len(samples)
        values = [float(cell[k] or 0.0) for k in ("p50", "p90", "p99", "p99.9", "max")]
        assert values == sorted(values) and cell["p50"] is not None and values[0] >= 0.0


async def test_off_by_default(cluster: EmbeddedCluster, names: tuple[str, str], timing: Timing) -> None:
    topic, group = names
    col = Collector()
    async with consumer(cluster, group, topic, col, timing) as c:
        await produce(cluster.namesrv_addr, topic, 5)
        await col.wait_unique(5)
        assert c.stages is None and not reads_stamped()
        assert c.config.stage_sample == 0
