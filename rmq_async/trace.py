"""Deprecated: the message trace is :mod:`rmq_async.observability.trace`; this module re-exports its
names so that ``rmq_async.trace.query_trace`` (the path the README named) keeps working, and warns
once, when first imported."""

from __future__ import annotations

import warnings

from .observability.trace import RMQ_SYS_TRACE_TOPIC as RMQ_SYS_TRACE_TOPIC
from .observability.trace import ConsumeReturnType as ConsumeReturnType
from .observability.trace import ConsumeTracer as ConsumeTracer
from .observability.trace import MessageType as MessageType
from .observability.trace import SendTracer as SendTracer
from .observability.trace import TraceBean as TraceBean
from .observability.trace import TraceContext as TraceContext
from .observability.trace import TraceDispatcher as TraceDispatcher
from .observability.trace import decode as decode
from .observability.trace import encode as encode
from .observability.trace import query_messages_by_key as query_messages_by_key
from .observability.trace import query_trace as query_trace

__all__ = [
    "RMQ_SYS_TRACE_TOPIC",
    "ConsumeReturnType",
    "ConsumeTracer",
    "MessageType",
    "SendTracer",
    "TraceBean",
    "TraceContext",
    "TraceDispatcher",
    "decode",
    "encode",
    "query_messages_by_key",
    "query_trace",
]

warnings.warn(
    "rmq_async.trace is deprecated: import from rmq_async.observability.trace",
    DeprecationWarning,
    stacklevel=2,
)
