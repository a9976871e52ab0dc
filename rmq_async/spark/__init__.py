"""PySpark data source ``rocketmq`` (needs the ``spark`` extra: pyspark >= 4.2 and pyarrow).

``spark.dataSource.register(RocketMQDataSource)`` then ``spark.read.format("rocketmq")`` or
``spark.readStream.format("rocketmq")`` with options ``namesrv`` and ``topic`` (see the README).
"""

from __future__ import annotations

from .listener import OffsetCommitListener as OffsetCommitListener
from .listener import queue_lag as queue_lag
from .offsets import DataLossError as DataLossError
from .options import SourceOptions as SourceOptions
from .options import parse_options as parse_options
from .source import SCHEMA as SCHEMA
from .source import RocketMQDataSource as RocketMQDataSource

__all__ = [
    "SCHEMA", "DataLossError", "OffsetCommitListener", "RocketMQDataSource", "SourceOptions", "parse_options",
    "queue_lag",
]  # fmt: skip
