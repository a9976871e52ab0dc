"""examples/spark_topic_to_topic.py in the suite's Spark session: topic to topic with the source and
the sink, restarted on its checkpoint with its last micro-batch run again. The target then holds
every event at least once, and exactly once by message id (the sink's uniqKeyColumn)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.spark_cluster import ClusterHandle

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_topic_to_topic.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_topic_to_topic", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_pipeline(spark: Any, rmq: ClusterHandle, out: Path, events: int) -> dict[str, Any]:
    ex = example()
    rmq.create_topic(ex.SOURCE)
    rmq.create_topic(ex.TARGET)
    got: dict[str, Any] = ex.run_pipeline(spark, rmq.namesrv, rmq.portal, str(out), events)
    assert got["replayed_batch"] is not None and got["micro_batches"][0] >= 2
    assert got["enriched_messages"] > got["events"] == 2 * events  # the replayed batch, twice
    assert got["enriched_distinct_ids"] == got["enriched_distinct_keys"] == got["events"]
    assert got["all_stamped"] and got["from_source_topic"]
    return got


def test_topic_to_topic_restarted_on_its_checkpoint(spark: Any, rmq: ClusterHandle, tmp_path: Path) -> None:
    check_pipeline(spark, rmq, tmp_path, 300)
