"""examples/spark_topic_to_topic.py in the suite's Spark session: topic to topic with the source and
the sink, restarted on its checkpoint with its last micro-batch run again. The target then holds
every event at least once, and exactly once by message id (the sink's uniqKeyColumn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle
from support.spark_pipeline import check_pipeline

# slow (about 16 s): the default run stays within its time budget; .ci/run's `-m slow` step runs it
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]


def test_topic_to_topic_restarted_on_its_checkpoint(spark: Any, rmq: ClusterHandle, tmp_path: Path) -> None:
    check_pipeline(spark, rmq, tmp_path, 300)
