"""Message trace, byte-compatible with the Java client's (``org.apache.rocketmq.client.trace``):
the sans-IO encoder, the dispatcher, the send and consume hooks, and reading traces back."""

from __future__ import annotations

from .dispatcher import TraceDispatcher as TraceDispatcher
from .encoder import RMQ_SYS_TRACE_TOPIC as RMQ_SYS_TRACE_TOPIC
from .encoder import ConsumeReturnType as ConsumeReturnType
from .encoder import MessageType as MessageType
from .encoder import TraceBean as TraceBean
from .encoder import TraceContext as TraceContext
from .encoder import decode as decode
from .encoder import encode as encode
from .hooks import ConsumeTracer as ConsumeTracer
from .hooks import SendTracer as SendTracer
from .query import query_messages_by_key as query_messages_by_key
from .query import query_trace as query_trace

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
