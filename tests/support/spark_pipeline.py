"""examples/spark_topic_to_topic.py driven from a test's Spark session (local or local-cluster)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from support.spark_cluster import ClusterHandle

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
