"""Transactional messages: the END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39) headers, the
system topics and properties of the half-message store, and the local transaction's outcome.

Strategy: the wire forms as ``tx-produce.jsonl`` (4.9.8) shows them. A half message is an ordinary
SEND_MESSAGE_V2 with sysFlag TRANSACTION_PREPARED_TYPE and the properties ``TRAN_MSG=true`` and
``PGROUP=<group>`` (:func:`half_properties`, in the Java client's HashMap order). The producer ends it
with a oneway END_TRANSACTION carrying the send answer's queue offset (``tranStateTableOffset``), the
commit-log offset decoded from the offset message id, the UNIQ_KEY as ``msgId`` and the outcome as a
sys-flag value (:data:`COMMIT_OR_ROLLBACK`); the broker asks again with a oneway
CHECK_TRANSACTION_STATE (the half message in the body) and is answered with another oneway
END_TRANSACTION (``fromTransactionCheck=true``, the check's ``transactionId``, its ``bname`` only when
the check had one: 4.9.8's has none). Pure data: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from .codes import MessageSysFlag, Prop
from .fastjson import java_map_order
from .headers import I32, I64, Header

__all__ = [
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "COMMIT_OR_ROLLBACK",
    "HALF_TOPIC",
    "OP_HALF_TOPIC",
    "REMOVE_TAG",
    "TRANSACTION_CHECK_GROUP",
    "TRANSACTION_CHECK_MAX_TIME_TOPIC",
    "TRANSACTION_CHECK_TIMES",
    "CheckTransactionStateRequestHeader",
    "EndTransactionRequestHeader",
    "TransactionResult",
    "half_properties",
]

#: ``TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC``: where the broker keeps half messages (queue 0)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: ``RMQ_SYS_TRANS_OP_HALF_TOPIC``: one op message per ended half message (body: its half offset)
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: ``TRANS_CHECK_MAX_TIME_TOPIC``: half messages checked too many times end here (never delivered)
TRANSACTION_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: ``TransactionalMessageUtil.REMOVETAG``: the tag of an op message
REMOVE_TAG = "d"
#: ``MixAll.CID_SYS_RMQ_TRANS``: the broker's own group that remembers how far the check got
TRANSACTION_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: ``MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES``: how many times the broker asked
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
#: ``MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS``: a message's own first-check delay
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"


class TransactionResult(Enum):
    """What a local transaction (or a check of it) decided (Java's ``LocalTransactionState``)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    #: not known yet: the broker asks again later (``UNKNOW``)
    UNKNOWN = "UNKNOW"


#: ``endTransaction``: the ``commitOrRollback`` value of each outcome (a transaction sys-flag type)
COMMIT_OR_ROLLBACK: Mapping[TransactionResult, int] = {
    TransactionResult.COMMIT: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    TransactionResult.ROLLBACK: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
    TransactionResult.UNKNOWN: MessageSysFlag.TRANSACTION_NOT_TYPE,
}


def half_properties(properties: Mapping[str, str], group: str) -> dict[str, str]:
    """``sendMessageInTransaction``: the properties of the half message: the delay level cleared,
    ``TRAN_MSG=true`` and ``PGROUP=<group>`` added, in the order the Java client's HashMap writes them
    (``KEYS, TRAN_MSG, UNIQ_KEY, WAIT, PGROUP, TAGS`` in the capture)."""
    props = {k: v for k, v in properties.items() if k != Prop.DELAY_TIME_LEVEL}
    props[Prop.TRANSACTION_PREPARED] = "true"
    props[Prop.PRODUCER_GROUP] = group
    return java_map_order(props)


@dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37, oneway): ``EndTransactionRequestHeader`` of the 4.9.8 client, plus
    ``bname`` on the send path (as the capture shows it)."""

    producer_group: str
    tran_state_table_offset: I64
    commit_log_offset: I64
    commit_or_rollback: I32
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None
    bname: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39, broker to client, oneway); 5.x brokers add ``topic`` and
    ``bname`` (``AbstractTransactionalMessageCheckListener.sendCheckMessage``)."""

    tran_state_table_offset: I64
    commit_log_offset: I64
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None
    bname: str | None = None
