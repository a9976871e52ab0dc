"""PySpark data source ``rocketmq`` (needs the ``spark`` extra: pyspark >= 4.2 and pyarrow).

``spark.dataSource.register(RocketMQDataSource)`` then ``spark.read.format("rocketmq")`` or
``spark.readStream.format("rocketmq")`` with options ``namesrv`` and ``topic`` (see the README).

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

#: the names that need pyspark, and the module of each
_LAZY = {
    "OffsetCommitListener": ".listener",
    "queue_lag": ".listener",
    "SCHEMA": ".source",
    "RocketMQDataSource": ".source",
}

__all__ = [
    "SCHEMA", "DataLossError", "OffsetCommitListener", "RocketMQDataSource", "SourceOptions", "parse_options",
    "queue_lag",
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
