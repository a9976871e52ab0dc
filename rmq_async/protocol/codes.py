"""Numbers of the remoting protocol, as apache/rocketmq 4.9.8 defines them.

Sources (paths in apache/rocketmq at tag rocketmq-all-4.9.8):
``common/.../protocol/RequestCode.java``, ``common/.../protocol/ResponseCode.java``,
``remoting/.../protocol/RemotingSysResponseCode.java``, ``remoting/.../protocol/LanguageCode.java``,
``common/.../sysflag/PullSysFlag.java``, ``common/.../sysflag/MessageSysFlag.java``,
``common/.../constant/PermName.java``, ``common/.../message/MessageConst.java``,
``common/.../MQVersion.java``.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "MQ_VERSION_V4_9_8",
    "MQ_VERSION_V5_0_0",
    "MQ_VERSION_V5_3_3",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "SYSTEM_PROPERTIES",
    "LanguageCode",
    "MessageSysFlag",
    "Perm",
    "Prop",
    "PullSysFlag",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]

#: ``MQVersion.Version.V4_9_8.ordinal()``: the header ``version`` this client sends. Name servers pick
#: the route-body format by it and brokers forward admin requests to clients only above V3_1_8.
MQ_VERSION_V4_9_8 = 409
#: ``MQVersion.Version.V5_3_3.ordinal()``: what 5.3.3 servers put in their headers.
MQ_VERSION_V5_3_3 = 479
#: ``MQVersion.Version.V5_0_0.ordinal()``: a broker at least this new resets one queue's offset (222
#: with ``queueId``/``offset``)
MQ_VERSION_V5_0_0 = 413

#: ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``: the name server's KV namespace of the order configs
#: (key: the topic, value ``brokerName:writeQueueNums;...``), which ``mqadmin updateTopic -o true``
#: writes and a name server with ``orderMessageEnable`` puts in the topic's route (``orderTopicConf``)
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class SerializeType(IntEnum):
    """Header serialization: the high byte of the second frame word."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    # request-reply: a reply sent (MSG_TYPE=reply) and the broker's push of it to the requester
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    # 5.x POP consumption
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209  # 5.x POP: too many held pops
    POLLING_TIMEOUT = 210  # 5.x POP: nothing found (at once or when the poll time ran out)
    FLOW_CONTROL = 215


class PullSysFlag:
    COMMIT_OFFSET = 0x1
    SUSPEND = 0x1 << 1
    SUBSCRIPTION = 0x1 << 2
    CLASS_FILTER = 0x1 << 3
    LITE_PULL_MESSAGE = 0x1 << 4

    @staticmethod
    def build(
        *,
        commit_offset: bool,
        suspend: bool,
        subscription: bool,
        class_filter: bool = False,
        lite_pull: bool = False,
    ) -> int:
        flag = 0
        if commit_offset:
            flag |= PullSysFlag.COMMIT_OFFSET
        if suspend:
            flag |= PullSysFlag.SUSPEND
        if subscription:
            flag |= PullSysFlag.SUBSCRIPTION
        if class_filter:
            flag |= PullSysFlag.CLASS_FILTER
        if lite_pull:
            flag |= PullSysFlag.LITE_PULL_MESSAGE
        return flag


class MessageSysFlag:
    COMPRESSED_FLAG = 0x1
    MULTI_TAGS_FLAG = 0x1 << 1
    TRANSACTION_NOT_TYPE = 0
    TRANSACTION_PREPARED_TYPE = 0x1 << 2
    TRANSACTION_COMMIT_TYPE = 0x2 << 2
    TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
    BORNHOST_V6_FLAG = 0x1 << 4
    STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
    NEED_UNWRAP_FLAG = 0x1 << 6
    INNER_BATCH_FLAG = 0x1 << 7
    COMPRESSION_LZ4_TYPE = 0x1 << 8
    COMPRESSION_ZSTD_TYPE = 0x2 << 8
    COMPRESSION_ZLIB_TYPE = 0x3 << 8
    COMPRESSION_TYPE_COMPARATOR = 0x7 << 8


class Perm:
    PRIORITY = 0x1 << 3
    READ = 0x1 << 2
    WRITE = 0x1 << 1
    INHERIT = 0x1


#: ``MessageConst.STRING_HASH_SET``: the property names the system uses, which Java's
#: ``Message.putUserProperty`` refuses (the typed setters, keys= tags= delay_level=, set some of them)
SYSTEM_PROPERTIES = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
        "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
        "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST",
        "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
    }
)  # fmt: skip


class Prop:
    """Property names (``MessageConst.java``)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    CLUSTER = "CLUSTER"
    # 5.x timer messages: what the producer asks for, and what the broker adds to delivered copies
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    # request-reply (DefaultMQProducer.request, MessageUtil.createReplyMessage)
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    MESSAGE_TYPE = "MSG_TYPE"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    KEY_SEPARATOR = " "
