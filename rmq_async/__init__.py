"""rmq_async: an asyncio-native Apache RocketMQ client speaking the broker's TCP remoting protocol.

The public API is re-exported here; submodules are implementation detail unless documented.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .client.api import PullResult as PullResult
from .client.api import PullStatus as PullStatus
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
from .errors import RocketMQError as RocketMQError
from .errors import SubscriptionRefused as SubscriptionRefused
from .errors import TLSError as TLSError
from .errors import TopicNotExist as TopicNotExist
from .producer.producer import MessageQueueSelector as MessageQueueSelector
from .producer.producer import Producer as Producer
from .producer.producer import select_by_key_hash as select_by_key_hash
from .protocol.filter import Selector as Selector
from .protocol.message import Message as Message
from .protocol.mq import MessageQueue as MessageQueue
from .protocol.stored import MessageExt as MessageExt
from .protocol.stored import Undecodable as Undecodable
from .protocol.stored import UndecodableMessageError as UndecodableMessageError

if TYPE_CHECKING:
    from .embedded.acl import Account as Account
    from .embedded.acl import AclConfig as AclConfig
    from .embedded.cluster import EmbeddedCluster as EmbeddedCluster
    from .embedded.tls import ServerTLS as ServerTLS

__version__ = "0.1.0.dev0"

__all__ = [
    "Account",
    "AclConfig",
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
    "EmbeddedCluster",
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
    "RocketMQError",
    "Selector",
    "SendResult",
    "SendStatus",
    "ServerTLS",
    "SubscriptionRefused",
    "TLSConfig",
    "TLSError",
    "Timing",
    "TopicNotExist",
    "TraceConfig",
    "Undecodable",
    "UndecodableCounts",
    "UndecodableMessageError",
    "select_by_key_hash",
]


_EMBEDDED = {
    "Account": "acl",
    "AclConfig": "acl",
    "EmbeddedCluster": "cluster",
    "ServerTLS": "tls",
}


def __getattr__(name: str) -> Any:
    # the embedded broker is imported on first use only: a consumer in production never loads it
    module = _EMBEDDED.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f".embedded.{module}", __name__), name)
    raise AttributeError(f"module 'rmq_async' has no attribute {name!r}")
