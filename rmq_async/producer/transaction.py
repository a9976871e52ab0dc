"""Transactional producer (Java ``TransactionMQProducer``), asyncio-native.

Why a subclass: Java's ``TransactionMQProducer`` is a ``DefaultMQProducer`` with a listener, and
every plain send still works on it; aiokafka keeps the transactional state on the one producer too.
So :class:`TransactionProducer` is a :class:`~.producer.Producer` that also takes the user's async
``checker`` (required: without it a transaction left UNKNOWN would wait for the broker to give up)
and adds :meth:`TransactionProducer.send_in_transaction`.

The flow, as ``DefaultMQProducerImpl.sendMessageInTransaction`` and ``endTransaction`` have it (and
``tx-produce.jsonl`` shows): the half message is an ordinary send with sysFlag
TRANSACTION_PREPARED_TYPE and ``TRAN_MSG``/``PGROUP`` (a delay level is cleared, as Java does); when
the broker stored it, the user's async local transaction runs (COMMIT, ROLLBACK or UNKNOWN; an
exception or ``None`` is UNKNOWN); a oneway END_TRANSACTION then tells the broker, with the send
answer's queue offset, the commit-log offset of the offset message id and the UNIQ_KEY. A send that
the broker stored without flushing (FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE) is rolled back without
running the local transaction; a failed send raises, with nothing to end.

Check-back (``ClientRemotingProcessor.checkTransactionState``, ``DefaultMQProducerImpl
.checkTransactionState``): the client instance hands each CHECK_TRANSACTION_STATE of this group to
:meth:`_on_check`, which queues it without blocking the connection (a full backlog drops it: the
broker asks again at its next check, as when Java's check pool rejects). ``check_concurrency``
worker tasks in the producer's task (on the client instance) take the checks, run the checker under
``check_timeout`` (a checker that raises or overruns answers UNKNOWN, with Java's remark) and answer
with a oneway END_TRANSACTION (``fromTransactionCheck=true``, the check's offsets and transaction
id) on the connection the check came on.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..client.api import SendResult, SendStatus
from ..client.instance import ClientInstance
from ..errors import ClientError, ProtocolError, RocketMQError
from ..protocol.codes import MessageSysFlag, Prop
from ..protocol.message import Message
from ..protocol.msgid import new_uniq_id, parse_offset_msg_id
from ..protocol.stored import MessageExt
from ..protocol.transaction import (
    COMMIT_OR_ROLLBACK,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    TransactionResult,
    half_properties,
)
from .producer import Producer

__all__ = [
    "LocalTransaction",
    "TransactionChecker",
    "TransactionProducer",
    "TransactionResult",
    "TransactionSendResult",
]

log = logging.getLogger("rmq_async.producer")

#: ``local_transaction(message, send_result)``: runs once the broker holds the half message;
#: ``send_result.msg_id`` is the transaction id a checker sees again (the message's UNIQ_KEY)
LocalTransaction = Callable[[Message, SendResult], Awaitable[TransactionResult | None]]
#: ``checker(message)``: the broker asks what became of the transaction of this half message
#: (``message.msg_id`` is its transaction id); Java's ``checkLocalTransaction``
TransactionChecker = Callable[[MessageExt], Awaitable[TransactionResult | None]]

#: the answer of a send the broker stored without the flush or the slave it was asked for: rolled back
#: without running the local transaction (``sendMessageInTransaction``)
_NOT_FLUSHED = frozenset(
    {SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}
)

_Check = tuple[str, CheckTransactionStateRequestHeader, MessageExt]


@dataclass(slots=True, frozen=True)
class TransactionSendResult(SendResult):
    """What :meth:`TransactionProducer.send_in_transaction` returns (Java's
    ``TransactionSendResult``): the half message's send result and what the local transaction said."""

    local_result: TransactionResult = TransactionResult.UNKNOWN


def _outcome(got: object, what: str) -> TransactionResult:
    """A local transaction's or checker's answer; ``None`` (Java's null) and anything that is not a
    :class:`TransactionResult` count as UNKNOWN, the latter logged."""
    if isinstance(got, TransactionResult):
        return got
    if got is not None:
        log.error("%s returned %r, not a TransactionResult: UNKNOWN", what, got)
    return TransactionResult.UNKNOWN


def _simple_desc(exc: BaseException) -> str:
    """``UtilAll.exceptionSimpleDesc``-like: the exception and where it was raised, one line."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f", {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
    return f"{exc!r}{where}"


class TransactionProducer(Producer):
    """A producer of transactional messages.

    ``async with TransactionProducer("group", checker=check, namesrv_addr=...) as p:
    await p.send_in_transaction(msg, local_transaction)``. ``checker`` answers the broker's
    check-backs; ``check_concurrency`` checks run at once (Java's check pool: 1), up to
    ``check_backlog`` wait (2000), each answered UNKNOWN after ``check_timeout`` seconds. The other
    arguments are :class:`~.producer.Producer`'s.
    """

    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        checker: TransactionChecker,
        check_concurrency: int = 1,
        check_backlog: int = 2000,
        check_timeout: float = 10.0,
        **kwargs: Any,
    ) -> None:
        if not callable(checker):
            raise ClientError("a TransactionProducer needs an async checker(message) -> TransactionResult")
        for name, value in (("check_concurrency", check_concurrency), ("check_backlog", check_backlog)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClientError(f"{name} must be a positive integer, not {value!r}")
        if (
            not isinstance(check_timeout, int | float)
            or isinstance(check_timeout, bool)
            or check_timeout <= 0
        ):
            raise ClientError(f"check_timeout must be a positive number of seconds, not {check_timeout!r}")
        super().__init__(group, **kwargs)
        self._checker = checker
        self._check_concurrency = check_concurrency
        self._check_backlog = check_backlog
        self._check_timeout = float(check_timeout)
        self._checks: MemoryObjectSendStream[_Check] | None = None
        self._checks_done: anyio.Event | None = None
        self._checks_scope: anyio.CancelScope | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    async def __aenter__(self) -> TransactionProducer:
        await self.start()
        return self

    async def _begin(self, client: ClientInstance) -> None:
        await super()._begin(client)
        send, receive = anyio.create_memory_object_stream[_Check](self._check_backlog)
        self._checks, self._checks_done = send, anyio.Event()
        client.register_transaction_checker(self.group, self._on_check)
        client.spawn(lambda: self._run_checks(receive))

    async def _end(self, client: ClientInstance) -> None:
        """Take no more checks; the running ones end within ``check_timeout`` (then are cancelled);
        the queued ones are dropped (the broker asks again)."""
        client.unregister_transaction_checker(self.group)
        checks, done = self._checks, self._checks_done
        self._checks = None
        if checks is not None:
            checks.close()
        if done is not None:
            with anyio.move_on_after(self._check_timeout, shield=True):
                await done.wait()
            if self._checks_scope is not None:
                self._checks_scope.cancel()
        await super()._end(client)

    async def _run_checks(self, receive: MemoryObjectReceiveStream[_Check]) -> None:
        """``check_concurrency`` workers over the check backlog (in the client instance's task group)."""
        try:
            with receive, anyio.CancelScope() as scope:
                self._checks_scope = scope
                async with anyio.create_task_group() as tg:
                    for _ in range(self._check_concurrency):
                        tg.start_soon(self._check_worker, receive.clone())
        finally:
            self._checks_scope = None
            if self._checks_done is not None:
                self._checks_done.set()

    async def _check_worker(self, receive: MemoryObjectReceiveStream[_Check]) -> None:
        with receive:
            async for addr, header, msg in receive:
                if self._checks is None:
                    continue  # stopping: what is queued is left to the broker's next check
                await self._check_one(addr, header, msg)

    # -- sending ------------------------------------------------------------------------------------

    async def send_in_transaction(
        self, msg: Message, local_transaction: LocalTransaction, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``local_transaction(msg, send_result)`` and end the
        transaction with what it returned (an exception or ``None``: UNKNOWN, left to the checker).

        Raises what a failed send raises (no transaction then); a failed END_TRANSACTION is logged,
        not raised (the broker's check-back resolves it), as in Java.
        """
        self._check(msg)
        props = dict(msg.properties)
        props.setdefault(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, new_uniq_id())
        # TRAN_MSG and PGROUP are system properties (Java's MessageAccessor.putProperty)
        half = Message.with_properties(msg.topic, msg.body, half_properties(props, self.group), flag=msg.flag)
        res = await self._send_half(half, timeout)
        await self._make_known(res)
        result = TransactionResult.UNKNOWN
        error: BaseException | None = None
        if res.status is SendStatus.SEND_OK:
            try:
                result = _outcome(await local_transaction(half, res), "the local transaction")
            except Exception as exc:
                log.error(
                    "local transaction of %s (topic %s) raised: UNKNOWN", res.msg_id, msg.topic, exc_info=True
                )
                error = exc
        elif res.status in _NOT_FLUSHED:
            result = TransactionResult.ROLLBACK
        remark = None if error is None else f"executeLocalTransactionBranch exception: {error!r}"
        try:
            addr = await self._end_transaction(res, result, remark)
        except RocketMQError as exc:
            log.warning("local transaction %s: %s, but ending it failed: %s", res.msg_id, result.name, exc)
        else:
            if self._tracer is not None:
                self._tracer.end_transaction(
                    half,
                    res.message_queue.topic,
                    res.msg_id,
                    res.msg_id,
                    result.value,
                    addr,
                    from_check=False,
                )
        fields = {f.name: getattr(res, f.name) for f in dataclasses.fields(SendResult)}
        return TransactionSendResult(**fields, local_result=result)

    async def _send_half(self, half: Message, timeout: float | None) -> SendResult:
        """The half message, sent as :meth:`Producer.send` sends it (queue rotation, retries, the
        trace's ``Pub`` record of type Trans_Msg_Half, OpenTelemetry), with the
        TRANSACTION_PREPARED_TYPE sys flag."""
        deadline = time.monotonic() + (timeout or self.config.send_timeout)
        topic = self._ns(half.topic)
        info = await self.publish_info(topic)
        body, props, sys_flag, uniq = self._prepare(half, self.compress_type_for(info))
        sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
        args = (half, topic, info, body, props, sys_flag, uniq, deadline, None, None, None)
        otel = self._otel
        if otel is None:
            return await self._send_prepared(*args)
        token = otel.start(half.topic, props, message_type="transaction")
        try:
            res = await self._send_prepared(*args)
        except BaseException as exc:
            otel.end(token, half.topic, uniq, exc)
            raise
        otel.end(token, half.topic, uniq, None)
        return res

    async def _make_known(self, res: SendResult) -> None:
        """Heartbeat now when the broker that took the half message has had none from this client:
        its check-back finds the producer by the group its heartbeat registered (Java waits for
        the next heartbeat, up to 30 s, which its 60 s check interval usually outlasts)."""
        client = self.client
        addr = client.broker_addr(res.message_queue.broker_name)
        if addr is not None and addr not in client.broker_reach:
            await client.send_heartbeat_to_all_brokers()

    async def _end_transaction(self, res: SendResult, result: TransactionResult, remark: str | None) -> str:
        """``endTransaction``: oneway END_TRANSACTION to the master of the queue the half went to
        (its address returned)."""
        try:
            _, commit_log_offset = parse_offset_msg_id(res.offset_msg_id)
        except ProtocolError as exc:
            raise ProtocolError(f"the send answer's offset message id {res.offset_msg_id!r}: {exc}") from None
        mq = res.message_queue
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=res.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=COMMIT_OR_ROLLBACK[result],
            msg_id=res.msg_id,
            from_transaction_check=False,
            transaction_id=res.transaction_id,
            bname=mq.broker_name,
        )
        client = self.client
        addr = await client.master_addr(mq.broker_name, mq.topic)
        await client.api.end_transaction(addr, header, remark, self.config.send_timeout)
        return addr

    # -- check-back ---------------------------------------------------------------------------------

    def _on_check(self, addr: str, cmd: Any, msg: MessageExt) -> None:
        """A CHECK_TRANSACTION_STATE from ``addr`` (called by the client instance: must not block)."""
        checks = self._checks
        if checks is None:
            return
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
        except ProtocolError as exc:
            log.warning("broker %s: unreadable transaction check: %s", addr, exc)
            return
        if self._client_config.namespace:
            msg.topic = self._client_config.without_namespace(msg.topic)
        try:
            checks.send_nowait((addr, header, msg))
        except anyio.WouldBlock:
            log.warning(
                "transaction check of %s dropped: %d checks wait already", header.msg_id, self._check_backlog
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # stopping

    async def _check_one(
        self, addr: str, header: CheckTransactionStateRequestHeader, msg: MessageExt
    ) -> None:
        result = TransactionResult.UNKNOWN
        error: BaseException | None = None
        with anyio.move_on_after(self._check_timeout) as scope:
            try:
                result = _outcome(await self._checker(msg), "the transaction checker")
            except Exception as exc:
                log.error("transaction checker raised for %s: UNKNOWN", msg.msg_id, exc_info=True)
                error = exc
        if scope.cancelled_caught:
            error = TimeoutError(f"the checker did not answer within {self._check_timeout}s")
            log.warning("transaction check of %s: %s: UNKNOWN", msg.msg_id, error)
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=COMMIT_OR_ROLLBACK[result],
            msg_id=msg.get_property(Prop.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id,
            from_transaction_check=True,
            transaction_id=header.transaction_id,
            bname=header.bname,
        )
        remark = None if error is None else f"checkLocalTransactionState Exception: {_simple_desc(error)}"
        try:
            await self.client.api.end_transaction(
                addr, end, remark, self._client_config.timing.request_timeout
            )
        except RocketMQError as exc:
            log.warning("answer to the transaction check of %s failed: %s", msg.msg_id, exc)
            return
        if self._tracer is not None:
            self._tracer.end_transaction(
                msg, self._ns(msg.topic), end.msg_id, end.msg_id, result.value, addr, from_check=True
            )
