"""The sans-IO protocol: frames, request and response codes, typed headers, fastjson bodies, the
properties codec, outgoing messages, stored-message decoding, message ids, tag and SQL92 filters, ACL
signing, a client's request settings, the pull request and answer (``pull``). No asyncio, sockets or
clocks (docs/architecture.md). Tools built on it import from here::

    from rmq_async.protocol import FrameDecoder, RemotingCommand, RequestCode, decode_messages
"""

from __future__ import annotations

from .acl import ACCESS_KEY as ACCESS_KEY
from .acl import SECURITY_TOKEN as SECURITY_TOKEN
from .acl import SIGNATURE as SIGNATURE
from .acl import UNIQUE_KEY_QUERY as UNIQUE_KEY_QUERY
from .acl import V4_9_3 as V4_9_3
from .acl import RequestSigner as RequestSigner
from .acl import sign_fields as sign_fields
from .acl import signature as signature
from .acl import verify as verify
from .bodies import BrokerData as BrokerData
from .bodies import CheckClientRequestBody as CheckClientRequestBody
from .bodies import ClusterInfo as ClusterInfo
from .bodies import ConnectionBody as ConnectionBody
from .bodies import ConsumeMessageDirectlyResult as ConsumeMessageDirectlyResult
from .bodies import ConsumerConnection as ConsumerConnection
from .bodies import ConsumerData as ConsumerData
from .bodies import ConsumerRunningInfo as ConsumerRunningInfo
from .bodies import ConsumeStats as ConsumeStats
from .bodies import ConsumeStatus as ConsumeStatus
from .bodies import DataVersion as DataVersion
from .bodies import GetConsumerListByGroupResponseBody as GetConsumerListByGroupResponseBody
from .bodies import GetConsumerStatusBody as GetConsumerStatusBody
from .bodies import GroupList as GroupList
from .bodies import HeartbeatData as HeartbeatData
from .bodies import JsonBody as JsonBody
from .bodies import KVTable as KVTable
from .bodies import LockBatchRequestBody as LockBatchRequestBody
from .bodies import LockBatchResponseBody as LockBatchResponseBody
from .bodies import OffsetWrapper as OffsetWrapper
from .bodies import ProcessQueueInfo as ProcessQueueInfo
from .bodies import ProducerData as ProducerData
from .bodies import QueueData as QueueData
from .bodies import RegisterBrokerBody as RegisterBrokerBody
from .bodies import ResetOffsetBody as ResetOffsetBody
from .bodies import SubscriptionData as SubscriptionData
from .bodies import SubscriptionGroupConfig as SubscriptionGroupConfig
from .bodies import TopicConfig as TopicConfig
from .bodies import TopicConfigSerializeWrapper as TopicConfigSerializeWrapper
from .bodies import TopicList as TopicList
from .bodies import TopicOffset as TopicOffset
from .bodies import TopicRouteData as TopicRouteData
from .bodies import TopicStatsTable as TopicStatsTable
from .bodies import UnlockBatchRequestBody as UnlockBatchRequestBody
from .codes import MQ_VERSION_V4_9_8 as MQ_VERSION_V4_9_8
from .codes import MQ_VERSION_V5_0_0 as MQ_VERSION_V5_0_0
from .codes import MQ_VERSION_V5_3_3 as MQ_VERSION_V5_3_3
from .codes import NAMESPACE_ORDER_TOPIC_CONFIG as NAMESPACE_ORDER_TOPIC_CONFIG
from .codes import LanguageCode as LanguageCode
from .codes import MessageSysFlag as MessageSysFlag
from .codes import Perm as Perm
from .codes import Prop as Prop
from .codes import PullSysFlag as PullSysFlag
from .codes import RequestCode as RequestCode
from .codes import ResponseCode as ResponseCode
from .codes import SerializeType as SerializeType
from .command import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
from .command import FLAG_ONEWAY as FLAG_ONEWAY
from .command import FLAG_RESPONSE as FLAG_RESPONSE
from .command import FrameDecoder as FrameDecoder
from .command import RemotingCommand as RemotingCommand
from .command import RequestSettings as RequestSettings
from .command import decode_frame as decode_frame
from .command import frame_prefix as frame_prefix
from .command import parse_command as parse_command
from .filter import SQL92 as SQL92
from .filter import SUB_ALL as SUB_ALL
from .filter import TAG as TAG
from .filter import Selector as Selector
from .filter import check_tag_expression as check_tag_expression
from .filter import is_tag_type as is_tag_type
from .filter import java_string_hash as java_string_hash
from .filter import java_trim as java_trim
from .filter import parse_tag_expression as parse_tag_expression
from .filter import tag_matches as tag_matches
from .headers import I32 as I32
from .headers import I64 as I64
from .headers import REQUEST_HEADERS as REQUEST_HEADERS
from .headers import RESPONSE_HEADERS as RESPONSE_HEADERS
from .headers import ConsumeMessageDirectlyResultRequestHeader as ConsumeMessageDirectlyResultRequestHeader
from .headers import ConsumerSendMsgBackRequestHeader as ConsumerSendMsgBackRequestHeader
from .headers import GetConsumerListByGroupRequestHeader as GetConsumerListByGroupRequestHeader
from .headers import GetConsumerRunningInfoRequestHeader as GetConsumerRunningInfoRequestHeader
from .headers import GetConsumerStatusRequestHeader as GetConsumerStatusRequestHeader
from .headers import GetEarliestMsgStoretimeRequestHeader as GetEarliestMsgStoretimeRequestHeader
from .headers import GetEarliestMsgStoretimeResponseHeader as GetEarliestMsgStoretimeResponseHeader
from .headers import GetKVConfigRequestHeader as GetKVConfigRequestHeader
from .headers import GetKVConfigResponseHeader as GetKVConfigResponseHeader
from .headers import GetMaxOffsetRequestHeader as GetMaxOffsetRequestHeader
from .headers import GetMaxOffsetResponseHeader as GetMaxOffsetResponseHeader
from .headers import GetMinOffsetRequestHeader as GetMinOffsetRequestHeader
from .headers import GetMinOffsetResponseHeader as GetMinOffsetResponseHeader
from .headers import GetRouteInfoRequestHeader as GetRouteInfoRequestHeader
from .headers import Header as Header
from .headers import NotifyConsumerIdsChangedRequestHeader as NotifyConsumerIdsChangedRequestHeader
from .headers import PullMessageRequestHeader as PullMessageRequestHeader
from .headers import PullMessageResponseHeader as PullMessageResponseHeader
from .headers import PutKVConfigRequestHeader as PutKVConfigRequestHeader
from .headers import QueryConsumerOffsetRequestHeader as QueryConsumerOffsetRequestHeader
from .headers import QueryConsumerOffsetResponseHeader as QueryConsumerOffsetResponseHeader
from .headers import RegisterBrokerRequestHeader as RegisterBrokerRequestHeader
from .headers import RegisterBrokerResponseHeader as RegisterBrokerResponseHeader
from .headers import ResetOffsetRequestHeader as ResetOffsetRequestHeader
from .headers import SearchOffsetRequestHeader as SearchOffsetRequestHeader
from .headers import SearchOffsetResponseHeader as SearchOffsetResponseHeader
from .headers import SendMessageRequestHeader as SendMessageRequestHeader
from .headers import SendMessageResponseHeader as SendMessageResponseHeader
from .headers import UnregisterBrokerRequestHeader as UnregisterBrokerRequestHeader
from .headers import UnregisterClientRequestHeader as UnregisterClientRequestHeader
from .headers import UpdateConsumerOffsetRequestHeader as UpdateConsumerOffsetRequestHeader
from .headers import ViewMessageRequestHeader as ViewMessageRequestHeader
from .headers import java_map_order as java_map_order
from .message import COMPRESS_THRESHOLD as COMPRESS_THRESHOLD
from .message import COMPRESSION_TYPES as COMPRESSION_TYPES
from .message import MAX_MESSAGE_SIZE as MAX_MESSAGE_SIZE
from .message import CompressionType as CompressionType
from .message import Message as Message
from .message import compress_body as compress_body
from .message import compression_flag as compression_flag
from .message import encode_batch_body as encode_batch_body
from .mq import MessageQueue as MessageQueue
from .msgid import UniqIdGenerator as UniqIdGenerator
from .msgid import create_offset_msg_id as create_offset_msg_id
from .msgid import new_uniq_id as new_uniq_id
from .msgid import parse_offset_msg_id as parse_offset_msg_id
from .properties import NAME_VALUE_SEPARATOR as NAME_VALUE_SEPARATOR
from .properties import PROPERTIES_MAX as PROPERTIES_MAX
from .properties import PROPERTY_SEPARATOR as PROPERTY_SEPARATOR
from .properties import check_property as check_property
from .properties import encode_properties as encode_properties
from .properties import lookup_property as lookup_property
from .properties import parse_properties as parse_properties
from .properties import properties_well_formed as properties_well_formed
from .pull import PULL_STATUS as PULL_STATUS
from .pull import PullAnswer as PullAnswer
from .pull import PullRefused as PullRefused
from .pull import PullStatus as PullStatus
from .pull import PullTemplate as PullTemplate
from .pull import pull_request as pull_request
from .pull import read_pull_answer as read_pull_answer
from .sql92 import Expression as Expression
from .sql92 import FilterSyntaxError as FilterSyntaxError
from .sql92 import Flavour as Flavour
from .sql92 import parse as parse
from .stored import MAGIC_CODE_V1 as MAGIC_CODE_V1
from .stored import MAGIC_CODE_V2 as MAGIC_CODE_V2
from .stored import UNDECODABLE_POLICIES as UNDECODABLE_POLICIES
from .stored import BrokenBodyError as BrokenBodyError
from .stored import MessageExt as MessageExt
from .stored import PulledMessages as PulledMessages
from .stored import Undecodable as Undecodable
from .stored import UndecodableMessageError as UndecodableMessageError
from .stored import UndecodablePolicy as UndecodablePolicy
from .stored import decode_messages as decode_messages
from .stored import decompress_body as decompress_body
from .stored import salvage_ids as salvage_ids
from .stored import undecodable_at as undecodable_at
from .strategies import NAME_ONLY_STRATEGIES as NAME_ONLY_STRATEGIES
from .strategies import STRATEGY_NAMES as STRATEGY_NAMES
from .strategies import canonical_strategy as canonical_strategy

__all__ = [
    "ACCESS_KEY",
    "COMPRESSION_TYPES",
    "COMPRESS_THRESHOLD",
    "DEFAULT_MAX_FRAME",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "I32",
    "I64",
    "MAGIC_CODE_V1",
    "MAGIC_CODE_V2",
    "MAX_MESSAGE_SIZE",
    "MQ_VERSION_V4_9_8",
    "MQ_VERSION_V5_0_0",
    "MQ_VERSION_V5_3_3",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "NAME_ONLY_STRATEGIES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTIES_MAX",
    "PROPERTY_SEPARATOR",
    "PULL_STATUS",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "SQL92",
    "STRATEGY_NAMES",
    "SUB_ALL",
    "TAG",
    "UNDECODABLE_POLICIES",
    "UNIQUE_KEY_QUERY",
    "V4_9_3",
    "BrokenBodyError",
    "BrokerData",
    "CheckClientRequestBody",
    "ClusterInfo",
    "CompressionType",
    "ConnectionBody",
    "ConsumeMessageDirectlyResult",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumeStats",
    "ConsumeStatus",
    "ConsumerConnection",
    "ConsumerData",
    "ConsumerRunningInfo",
    "ConsumerSendMsgBackRequestHeader",
    "DataVersion",
    "Expression",
    "FilterSyntaxError",
    "Flavour",
    "FrameDecoder",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerListByGroupResponseBody",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusBody",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetRouteInfoRequestHeader",
    "GroupList",
    "Header",
    "HeartbeatData",
    "JsonBody",
    "KVTable",
    "LanguageCode",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageSysFlag",
    "NotifyConsumerIdsChangedRequestHeader",
    "OffsetWrapper",
    "Perm",
    "ProcessQueueInfo",
    "ProducerData",
    "Prop",
    "PullAnswer",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PullRefused",
    "PullStatus",
    "PullSysFlag",
    "PullTemplate",
    "PulledMessages",
    "PutKVConfigRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueueData",
    "RegisterBrokerBody",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "RemotingCommand",
    "RequestCode",
    "RequestSettings",
    "RequestSigner",
    "ResetOffsetBody",
    "ResetOffsetRequestHeader",
    "ResponseCode",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "Selector",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "SerializeType",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicList",
    "TopicOffset",
    "TopicRouteData",
    "TopicStatsTable",
    "Undecodable",
    "UndecodableMessageError",
    "UndecodablePolicy",
    "UniqIdGenerator",
    "UnlockBatchRequestBody",
    "UnregisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
    "canonical_strategy",
    "check_property",
    "check_tag_expression",
    "compress_body",
    "compression_flag",
    "create_offset_msg_id",
    "decode_frame",
    "decode_messages",
    "decompress_body",
    "encode_batch_body",
    "encode_properties",
    "frame_prefix",
    "is_tag_type",
    "java_map_order",
    "java_string_hash",
    "java_trim",
    "lookup_property",
    "new_uniq_id",
    "parse",
    "parse_command",
    "parse_offset_msg_id",
    "parse_properties",
    "parse_tag_expression",
    "properties_well_formed",
    "pull_request",
    "read_pull_answer",
    "salvage_ids",
    "sign_fields",
    "signature",
    "tag_matches",
    "undecodable_at",
    "verify",
]
