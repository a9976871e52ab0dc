"""rmq_async: an asyncio-native Apache RocketMQ client speaking the broker's TCP remoting protocol.

The public API is re-exported here; submodules are implementation detail unless documented.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .client.api import PullResult as PullResult
from .client.api import PullStatus as PullStatus
from .client.api import SendResult as SendResult
from .client.api import SendStatus as SendStatus
from .config import ClientConfig as ClientConfig
from .config import ConsumerConfig as ConsumerConfig
from .config import Credentials as Credentials
from .config import ProducerConfig as ProducerConfig
from .config import Timing as Timing
from .config import TLSConfig as TLSConfig
from .consumer.delivery import Delivery as Delivery
from .consumer.lite_pull import LitePullConsumer as LitePullConsumer
from .consumer.push import PushConsumer as PushConsumer
from .consumer.types import ConsumeContext as ConsumeContext
from .consumer.types import ConsumeResult as ConsumeResult
from .consumer.types import OrderlyContext as OrderlyContext
from .consumer.types import OrderlyResult as OrderlyResult
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
from .producer.producer import Producer as Producer
from .protocol.filter import Selector as Selector
from .protocol.message import Message as Message
from .protocol.mq import MessageQueue as MessageQueue
from .protocol.stored import MessageExt as MessageExt
from .protocol.stored import Undecodable as Undecodable
from .protocol.stored import UndecodableMessageError as UndecodableMessageError

if TYPE_CHECKING:
    from .embedded.cluster import EmbeddedCluster as EmbeddedCluster

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
    "ConsumeResult",
    "ConsumerConfig",
    "Credentials",
    "Delivery",
    "EmbeddedCluster",
    "InvalidMessageError",
    "LitePullConsumer",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "OrderlyContext",
    "OrderlyResult",
    "Producer",
    "ProducerConfig",
    "ProtocolError",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "RemotingError",
    "RequestTimeout",
    "RocketMQError",
    "Selector",
    "SendResult",
    "SendStatus",
    "SubscriptionRefused",
    "TLSConfig",
    "TLSError",
    "Timing",
    "TopicNotExist",
    "Undecodable",
    "UndecodableMessageError",
]


def __getattr__(name: str) -> Any:
    # the embedded broker is imported on first use only: a consumer in production never loads it
    if name == "EmbeddedCluster":
        from .embedded.cluster import EmbeddedCluster

        return EmbeddedCluster
    raise AttributeError(f"module 'rmq_async' has no attribute {name!r}")
