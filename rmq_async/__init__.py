"""rmq_async: an asyncio-native Apache RocketMQ client speaking the broker's TCP remoting protocol.

The client's public API is re-exported here; submodules are implementation detail unless documented.
The embedded name server and broker (``EmbeddedCluster``, ``ServerTLS``, ``AclConfig``, ``Account``)
are imported from :mod:`rmq_async.embedded`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import AuthError as AuthError
from .errors import BrokerError as BrokerError
from .errors import ClientError as ClientError
from .errors import ConfigError as ConfigError
from .errors import ConnectError as ConnectError
from .errors import ConnectionClosed as ConnectionClosed
from .errors import InvalidMessageError as InvalidMessageError
from .errors import MQClientError as MQClientError
from .errors import ProtocolError as ProtocolError
from .errors import RemotingError as RemotingError
from .errors import RequestTimeout as RequestTimeout
from .errors import RequestTimeoutError as RequestTimeoutError
from .errors import RocketMQError as RocketMQError
from .errors import SubscriptionRefused as SubscriptionRefused
from .errors import TLSError as TLSError
from .errors import TopicNotExist as TopicNotExist
from .errors import UnsupportedByBrokerError as UnsupportedByBrokerError

if TYPE_CHECKING:
    from .client.api import PullResult as PullResult
    from .client.api import SendResult as SendResult
    from .client.api import SendStatus as SendStatus
    from .client.reach import Reach as Reach
    from .config import ClientConfig as ClientConfig
    from .config import ConsumeFrom as ConsumeFrom
    from .config import ConsumerConfig as ConsumerConfig
    from .config import Credentials as Credentials
    from .config import LitePullConfig as LitePullConfig
    from .config import MessageModel as MessageModel
    from .config import OtelConfig as OtelConfig
    from .config import ProducerConfig as ProducerConfig
    from .config import Timing as Timing
    from .config import TLSConfig as TLSConfig
    from .config import TraceConfig as TraceConfig
    from .consumer.delivery import Delivery as Delivery
    from .consumer.delivery import DeliveryStream as DeliveryStream
    from .consumer.health import ConsumerHealth as ConsumerHealth
    from .consumer.health import QueueHealth as QueueHealth
    from .consumer.health import UndecodableCounts as UndecodableCounts
    from .consumer.lite_pull import LitePullConsumer as LitePullConsumer
    from .consumer.push import PushConsumer as PushConsumer
    from .consumer.types import ConsumeContext as ConsumeContext
    from .consumer.types import ConsumeResult as ConsumeResult
    from .consumer.types import Handler as Handler
    from .consumer.types import Hook as Hook
    from .consumer.types import OrderlyContext as OrderlyContext
    from .consumer.types import OrderlyHandler as OrderlyHandler
    from .consumer.types import OrderlyResult as OrderlyResult
    from .consumer.types import RebalanceListener as RebalanceListener
    from .producer.producer import MessageQueueSelector as MessageQueueSelector
    from .producer.producer import Producer as Producer
    from .producer.producer import select_by_key_hash as select_by_key_hash
    from .producer.transaction import TransactionProducer as TransactionProducer
    from .producer.transaction import TransactionSendResult as TransactionSendResult
    from .protocol.filter import Selector as Selector
    from .protocol.message import Message as Message
    from .protocol.mq import MessageQueue as MessageQueue
    from .protocol.pull import PullStatus as PullStatus
    from .protocol.reply import create_reply_message as create_reply_message
    from .protocol.stored import MessageExt as MessageExt
    from .protocol.stored import Undecodable as Undecodable
    from .protocol.stored import UndecodableMessageError as UndecodableMessageError
    from .protocol.transaction import TransactionResult as TransactionResult

__version__ = "0.1.0.dev0"

__all__ = [
    "AuthError",
    "BrokerError",
    "ClientConfig",
    "ClientError",
    "ConfigError",
    "ConnectError",
    "ConnectionClosed",
    "ConsumeContext",
    "ConsumeFrom",
    "ConsumeResult",
    "ConsumerConfig",
    "ConsumerHealth",
    "Credentials",
    "Delivery",
    "DeliveryStream",
    "Handler",
    "Hook",
    "InvalidMessageError",
    "LitePullConfig",
    "LitePullConsumer",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageQueueSelector",
    "OrderlyContext",
    "OrderlyHandler",
    "OrderlyResult",
    "OtelConfig",
    "Producer",
    "ProducerConfig",
    "ProtocolError",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueHealth",
    "Reach",
    "RebalanceListener",
    "RemotingError",
    "RequestTimeout",
    "RequestTimeoutError",
    "RocketMQError",
    "Selector",
    "SendResult",
    "SendStatus",
    "SubscriptionRefused",
    "TLSConfig",
    "TLSError",
    "Timing",
    "TopicNotExist",
    "TraceConfig",
    "TransactionProducer",
    "TransactionResult",
    "TransactionSendResult",
    "Undecodable",
    "UndecodableCounts",
    "UndecodableMessageError",
    "UnsupportedByBrokerError",
    "create_reply_message",
    "select_by_key_hash",
]


#: the public names and their modules, imported on first use (PEP 562): a Spark executor or a script
#: that needs a producer does not load every consumer, the OpenTelemetry support and the embedded
#: broker (``import rmq_async`` costs a few milliseconds; each module loads when a name of it is used)
_LAZY = {
    "ClientConfig": ".config",
    "ConsumeContext": ".consumer.types",
    "ConsumeFrom": ".config",
    "ConsumeResult": ".consumer.types",
    "ConsumerConfig": ".config",
    "ConsumerHealth": ".consumer.health",
    "Credentials": ".config",
    "Delivery": ".consumer.delivery",
    "DeliveryStream": ".consumer.delivery",
    "Handler": ".consumer.types",
    "Hook": ".consumer.types",
    "LitePullConfig": ".config",
    "LitePullConsumer": ".consumer.lite_pull",
    "Message": ".protocol.message",
    "MessageExt": ".protocol.stored",
    "MessageModel": ".config",
    "MessageQueue": ".protocol.mq",
    "MessageQueueSelector": ".producer.producer",
    "OrderlyContext": ".consumer.types",
    "OrderlyHandler": ".consumer.types",
    "OrderlyResult": ".consumer.types",
    "OtelConfig": ".config",
    "Producer": ".producer.producer",
    "ProducerConfig": ".config",
    "PullResult": ".client.api",
    "PullStatus": ".protocol.pull",
    "PushConsumer": ".consumer.push",
    "QueueHealth": ".consumer.health",
    "Reach": ".client.reach",
    "RebalanceListener": ".consumer.types",
    "Selector": ".protocol.filter",
    "SendResult": ".client.api",
    "SendStatus": ".client.api",
    "TLSConfig": ".config",
    "Timing": ".config",
    "TraceConfig": ".config",
    "TransactionProducer": ".producer.transaction",
    "TransactionResult": ".protocol.transaction",
    "TransactionSendResult": ".producer.transaction",
    "Undecodable": ".protocol.stored",
    "UndecodableCounts": ".consumer.health",
    "UndecodableMessageError": ".protocol.stored",
    "create_reply_message": ".protocol.reply",
    "select_by_key_hash": ".producer.producer",
}


#: names that moved out of the client API, still importable from here with a DeprecationWarning
_MOVED = {
    "Account": "rmq_async.embedded",
    "AclConfig": "rmq_async.embedded",
    "EmbeddedCluster": "rmq_async.embedded",
    "ServerTLS": "rmq_async.embedded",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        moved = _MOVED.get(name)
        if moved is None:
            raise AttributeError(f"module 'rmq_async' has no attribute {name!r}")
        import importlib
        import warnings

        warnings.warn(
            f"import {name} from {moved}: 'from rmq_async import {name}' is deprecated (the package root "
            "holds the client API)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
