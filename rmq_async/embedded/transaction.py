"""Transactional messages: half messages, END_TRANSACTION (37) and the check-back (39).

Strategy, following RocketMQ 4.9.8's ``TransactionalMessageBridge``, ``EndTransactionProcessor``
and ``TransactionalMessageServiceImpl.check`` (5.3.3 where it differs), as ``tx-produce.jsonl``
shows them:

* A send with ``TRAN_MSG=true`` is stored apart (:func:`put_half`, ``parseHalfMessageInner``): in
  ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, with ``REAL_TOPIC``/``REAL_QID`` added and the transaction
  bits of its sys flag cleared, so no consumer sees it. The send answer names the half message
  (its offset id, its offset in the half queue) and the queue the client asked for.
* END_TRANSACTION (oneway) finds the half message by commit-log offset and checks group, half
  offset and commit-log offset (``checkPrepareMessage``). COMMIT stores the final message in its
  real topic and queue (the half's properties string, sys flag COMMIT_TYPE, the half's commit-log
  offset as prepared offset: ``endMessageTransaction``); COMMIT and ROLLBACK then write an op
  message (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body the half offset). UNKNOWN (0) is
  logged and nothing changes.
* :class:`TransactionCheckService` walks the half queue every ``transaction_check_interval`` from
  where it got last time (kept as the offset of group ``CID_RMQ_SYS_TRANS``), skipping halves an op
  message ended. A half older than ``transaction_timeout`` (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``;
  a younger one stops the walk, as does one stored during this walk) is put again at the end of
  the half queue with ``TRANSACTION_CHECK_TIMES`` incremented (``putBackHalfMsgQueue``), and that
  new copy is sent in a oneway CHECK_TRANSACTION_STATE to one producer connection of its group
  (round robin, ``getAvailableChannel``); with no producer connected the check is lost, and counted.
  After ``transaction_check_max`` checks a half goes to ``TRANS_CHECK_MAX_TIME_TOPIC``
  (``resolveDiscardMsg``): rolled back, in effect.
"""

from __future__ import annotations

import itertools
import logging

import anyio

from ..protocol.codes import MessageSysFlag, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.transaction import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    REMOVE_TAG,
    TRANSACTION_CHECK_GROUP,
    TRANSACTION_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_CHECK_TIMES,
    CheckTransactionStateRequestHeader,
)
from .context import BrokerContext, HandlerTable
from .fields import opt_bool, req_int, req_str
from .jcompat import props_decode, tags_code_of
from .server import Connection
from .store import PutResult, StoredMessage, now_ms

__all__ = ["TransactionCheckService", "handlers", "put_half"]

log = logging.getLogger("rmq_async.embedded")

_TRAN_BITS = 0x3 << 2  # the transaction type bits of a sys flag (MessageSysFlag.resetTransactionValue)
_COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE
_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


def put_half(
    ctx: BrokerContext,
    topic: str,
    queue_id: int,
    body: bytes,
    flag: int,
    props: dict[str, str],
    sys_flag: int,
    born_ts: int,
    born_host: bytes,
    reconsume: int,
) -> PutResult:
    """``prepareMessage`` / ``parseHalfMessageInner``: the half message, stored apart."""
    props["REAL_TOPIC"] = topic
    props["REAL_QID"] = str(queue_id)
    return ctx.store.put(
        HALF_TOPIC,
        0,
        body,
        flag,
        ctx.encode_props(props),
        tags_code_of(props),
        sys_flag & ~_TRAN_BITS,
        born_ts,
        born_host,
        reconsume,
    )


def _write_op(ctx: BrokerContext, half: StoredMessage) -> None:
    """``addRemoveTagInTransactionOp``: the op message that marks ``half`` ended."""
    props = {"TAGS": REMOVE_TAG, "WAIT": "false"}
    ctx.store.put(
        OP_HALF_TOPIC,
        0,
        str(half.queue_offset).encode(),
        0,
        ctx.encode_props(props),
        tags_code_of(props),
        0,
        now_ms(),
        ctx.store.store_host,
    )


def handlers(ctx: BrokerContext) -> HandlerTable:
    def end_transaction(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """END_TRANSACTION (37): ``EndTransactionProcessor.processRequest``."""
        group = req_str(cmd, "producerGroup")
        half_offset = req_int(cmd, "tranStateTableOffset")
        phys = req_int(cmd, "commitLogOffset")
        kind = req_int(cmd, "commitOrRollback")
        req_str(cmd, "msgId")
        from_check = bool(opt_bool(cmd, "fromTransactionCheck"))
        if kind not in (_COMMIT, _ROLLBACK):
            # NOT_TYPE (UNKNOW) or an unknown value: no answer at all, as Java returns null
            log.info(
                "%s: producer %s left transaction %s pending (from check: %s) %s",
                ctx.settings.name, conn.addr, cmd.ext_fields.get("msgId"), from_check, cmd.remark or "",
            )  # fmt: skip
            return None
        half = ctx.store.lookup(phys)
        if half is None or half.topic != HALF_TOPIC:
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        props = props_decode(half.props)
        if props.get("PGROUP") != group:
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != half_offset:
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        if half.phys_offset != phys:
            return ctx.respond(cmd, ResponseCode.SYSTEM_ERROR, "The commit log offset wrong")
        if kind == _COMMIT:
            topic = props.get("REAL_TOPIC", "")
            queue_id = int(props.get("REAL_QID", "0") or 0)
            tags_code = tags_code_of(props)
            # endMessageTransaction: the half's properties string as it is (REAL_*, TRAN_MSG kept)
            res = ctx.store.put(
                topic, queue_id, half.body, half.flag, half.props, tags_code,
                (half.sys_flag & ~_TRAN_BITS) | _COMMIT, half.born_ts, half.born_host,
                half.reconsume_times, prepared_offset=phys,
            )  # fmt: skip
            ctx.holds.notify(topic, queue_id, res.queue_offset + 1, tags_code, half.props)
        _write_op(ctx, half)
        return ctx.respond(cmd, ResponseCode.SUCCESS)

    return {RequestCode.END_TRANSACTION: end_transaction}


class TransactionCheckService:
    """The broker's check-back of half messages nobody ended (``TransactionalMessageCheckService``)."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._ended: set[int] = set()  # half offsets (from the current one on) an op message ended
        self._op_read = 0  # op messages read so far
        self._round_robin = itertools.count()
        #: checks sent, and checks lost because no producer of the group was connected
        self.checks_sent = 0
        self.checks_lost = 0

    async def run(self) -> None:
        timing = self.ctx.settings.timing
        while True:
            await anyio.sleep(timing.transaction_check_interval)
            self.check()

    @property
    def offset(self) -> int:
        """The next half offset the check looks at."""
        return max(0, self.ctx.state.query_offset(TRANSACTION_CHECK_GROUP, HALF_TOPIC, 0))

    def _read_ops(self) -> None:
        store = self.ctx.store
        cq = store.queue(OP_HALF_TOPIC, 0)
        if cq is None:
            return
        while self._op_read < len(cq.offsets):
            op = store.lookup(cq.offsets[self._op_read])
            self._op_read += 1
            if op is not None and op.body.isdigit():
                self._ended.add(int(op.body))

    def check(self) -> int:
        """One walk of the half queue (what the service does each interval; a test may call it at
        once). Returns the number of checks sent."""
        ctx = self.ctx
        timing = ctx.settings.timing
        store = ctx.store
        start = now_ms()
        self._read_ops()
        cq = store.queue(HALF_TOPIC, 0)
        if cq is None:
            return 0
        i = self.offset
        sent = 0
        while i < len(cq.offsets):
            if i in self._ended:
                i += 1
                continue
            half = store.lookup(cq.offsets[i])
            if half is None:
                i += 1
                continue
            props = props_decode(half.props)
            times = int(props.get(TRANSACTION_CHECK_TIMES, "0") or 0)
            if times >= timing.transaction_check_max:
                self._discard(half, props)
                i += 1
                continue
            if half.store_ts >= start:
                break  # stored during this walk (a copy put back just now included)
            immunity = round(timing.transaction_timeout * 1000)
            own = props.get(CHECK_IMMUNITY_TIME_IN_SECONDS)
            if own is not None and own.lstrip("-").isdigit() and int(own) != -1:
                immunity = int(own) * 1000
            age = start - half.born_ts
            if 0 <= age < immunity:
                break  # too young: so is everything after it
            props[TRANSACTION_CHECK_TIMES] = str(times + 1)
            self._check_again(half, props)
            sent += 1
            i += 1
        ctx.state.commit_offset(TRANSACTION_CHECK_GROUP, HALF_TOPIC, 0, i)
        self._ended = {o for o in self._ended if o >= i}
        return sent

    def _discard(self, half: StoredMessage, props: dict[str, str]) -> None:
        """``resolveDiscardMsg``: checked too often: kept in TRANS_CHECK_MAX_TIME_TOPIC, never delivered."""
        ctx = self.ctx
        log.warning(
            "%s: half message %s checked %s times: moved to %s",
            ctx.settings.name, props.get("UNIQ_KEY"), props.get(TRANSACTION_CHECK_TIMES),
            TRANSACTION_CHECK_MAX_TIME_TOPIC,
        )  # fmt: skip
        ctx.create_topic_in_back_method(TRANSACTION_CHECK_MAX_TIME_TOPIC, 1, 6)
        ctx.store.put(
            TRANSACTION_CHECK_MAX_TIME_TOPIC, 0, half.body, half.flag, half.props, tags_code_of(props),
            half.sys_flag, half.born_ts, half.born_host, half.reconsume_times,
        )  # fmt: skip

    def _check_again(self, half: StoredMessage, props: dict[str, str]) -> None:
        """``putBackHalfMsgQueue`` + ``sendCheckMessage``."""
        ctx = self.ctx
        store = ctx.store
        props_str = ctx.encode_props(props)
        res = store.put(
            HALF_TOPIC, 0, half.body, half.flag, props_str, tags_code_of(props), half.sys_flag,
            half.born_ts, half.born_host, half.reconsume_times,
        )  # fmt: skip
        copy = store.lookup(res.phys_offset)
        assert copy is not None
        group = props.get("PGROUP")
        channels = list(ctx.producers.groups.get(group or "", {}).values())
        if not channels:
            self.checks_lost += 1
            log.warning(
                "%s: check of transaction %s lost: no producer of group %s",
                ctx.settings.name,
                props.get("UNIQ_KEY"),
                group,
            )
            return
        uniq = props.get("UNIQ_KEY")
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=res.queue_offset,
            commit_log_offset=res.phys_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=res.msg_id,
            # 5.x: the header's topic is set before the message's is restored (the half topic)
            topic=HALF_TOPIC if ctx.settings.flavour == 5 else None,
            bname=ctx.settings.name if ctx.settings.flavour == 5 else None,
        )
        # the body: the copy with its real topic and queue; WAIT false (renewHalfMessageInner sets it
        # on the map it shares with the message after the stored string was written)
        props["WAIT"] = "false"
        copy.queue_id = int(props.get("REAL_QID", "0") or 0)
        body = copy.reencode(props.get("REAL_TOPIC", ""), ctx.encode_props(props))
        ch = channels[next(self._round_robin) % len(channels)]
        ch.conn.oneway(
            RemotingCommand.request(
                RequestCode.CHECK_TRANSACTION_STATE,
                header.to_ext_fields(),
                body,
                language="JAVA",
                version=ctx.settings.version,
            )
        )
        self.checks_sent += 1
