"""PySpark data source ``rocketmq`` (needs the ``spark`` extra: pyspark >= 4.2 and pyarrow).

``spark.dataSource.register(RocketMQDataSource)`` then ``spark.read.format("rocketmq")`` or
``spark.readStream.format("rocketmq")`` with options ``namesrv`` and ``topic`` (or ``topicPattern``),
and ``df.write.format("rocketmq")`` / ``df.writeStream.format("rocketmq")`` (the sink, :mod:`.sink`;
see docs/guides/spark.md).

The names that need pyspark (the data source, its schema, the offset listener) are imported on first
use, so the pyspark-free parts (``rmq_async.spark.options``, ``rmq_async.spark.offsets``) import
without the extra (and a type checker that follows this package does not need pyspark); a type checker
sees them here as ``Any``: import them from ``rmq_async.spark.source`` / ``.listener`` for their types.
"""

from __future__ import annotations

import importlib
from typing import Any

from .offsets import DataLossError as DataLossError
from .options import SourceOptions as SourceOptions
from .options import parse_options as parse_options
from .sink_options import SinkOptions as SinkOptions
from .sink_options import parse_sink_options as parse_sink_options

#: the names that need pyspark, and the module of each
_LAZY = {
    "OffsetCommitListener": ".listener",
    "queue_lag": ".listener",
    "SCHEMA": ".source",
    "RocketMQDataSource": ".source",
    "SinkCommit": ".sink",
    "SinkSendError": ".sink",
}

__all__ = [
    "SCHEMA", "DataLossError", "OffsetCommitListener", "RocketMQDataSource", "SinkCommit", "SinkOptions",
    "SinkSendError", "SourceOptions", "parse_options", "parse_sink_options", "queue_lag",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
