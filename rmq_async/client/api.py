"""One typed coroutine per RPC (Java ``MQClientAPIImpl``).

Each builds a request from a typed header, sends it through the connection pool, and turns the answer
into a typed result or a :class:`BrokerError` naming the request code, response code, remark and
address. No retries here: callers decide (the producer retries sends, the pull loop backs off).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from ..errors import BrokerError, ProtocolError, TopicNotExist
from ..protocol import headers as H
from ..protocol.bodies import (
    CheckClientRequestBody,
    ConsumerRunningInfo,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    SubscriptionData,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from ..protocol.codes import RequestCode, ResponseCode, SerializeType
from ..protocol.command import RemotingCommand, RequestSettings
from ..protocol.fastjson import java_map_order
from ..protocol.mq import MessageQueue
from ..protocol.pop import (
    AckMessageRequestHeader,
    Assignment,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    decode_assignments,
    encode_query_assignment,
    encode_set_mode,
)
from ..protocol.pull import (
    PreparedPull,
    PullRefused,
    PullStatus,
    PullTemplate,
    pull_request,
    read_pull_answer,
)
from ..protocol.stored import BrokenBodyError, MessageExt, UndecodableMessageError, decode_messages
from ..protocol.transaction import EndTransactionRequestHeader
from ..transport.connection import stamp_reads
from ..transport.pool import ConnectionPool
from .auth import broker_error

__all__ = ["MQClientAPI", "PullResult", "PullStatus", "SendResult", "SendStatus", "stamp_reads"]

#: pull templates an API keeps at most (one per queue and subscription version; cleared past it)
_PULL_TEMPLATES_MAX = 4096
#: a pull header's fields that a template keeps as its first pull had them: all but the open ones
_PULL_KEY_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(H.PullMessageRequestHeader)
    if f.name not in ("queue_offset", "max_msg_nums", "commit_offset", "sys_flag")
)
_pull_key = operator.attrgetter(*_PULL_KEY_FIELDS)


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    messages: list[MessageExt] = field(default_factory=list)
    remark: str | None = None
    #: the response body as received, when ``pull(decode=False)`` (``messages`` stays empty)
    body: bytes = b""
    #: when the transport read the answer (``perf_counter_ns``) while reads are stamped
    #: (:func:`stamp_reads`, a consumer's stage recorder); 0 otherwise
    received_ns: int = 0


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(slots=True, frozen=True)
class SendResult:
    """What a send returns: ``msg_id`` is the client's UNIQ_KEY (comma-joined for a batch),
    ``offset_msg_id`` the broker's store id (likewise)."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None
    #: the broker's ``TRACE_ON`` answer: False only when it says "false" (``processSendResponse``)
    trace_on: bool = True


class MQClientAPI:
    """Typed RPCs over a :class:`ConnectionPool`. Stateless apart from the header defaults
    (``settings``, which the Spark reader's pulls use too)."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        language: str = "PYTHON",
        version: int = 409,
        serialize_type: SerializeType = SerializeType.JSON,
        stream: bool = False,
    ) -> None:
        self.pool = pool
        self.settings = RequestSettings(serialize_type, language, version, stream)
        #: each queue's pull template (:meth:`pull`), by the header fields that do not change per pull
        self._pull_templates: dict[tuple[object, ...], PullTemplate] = {}

    # -- plumbing --------------------------------------------------------------------------------

    def _cmd(
        self, code: int, ext: dict[str, str] | None, body: bytes = b"", *, oneway: bool = False
    ) -> RemotingCommand:
        return self.settings.request(code, ext, body, oneway=oneway)

    async def _call(
        self, addr: str, cmd: RemotingCommand, timeout: float, *, coalesce: bool = False
    ) -> RemotingCommand:
        return await self.pool.request(addr, cmd, timeout, coalesce=coalesce)

    @staticmethod
    def _fail(resp: RemotingCommand, req: RemotingCommand, addr: str) -> BrokerError:
        """A BrokerError for the answer; an :class:`AuthError` when it is an ACL refusal."""
        return broker_error(resp.code, resp.remark, req.code, req.ext_fields, addr)

    async def _expect_ok(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        resp = await self._call(addr, cmd, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return resp

    # -- name server -----------------------------------------------------------------------------

    async def get_route(self, namesrv: str, topic: str, timeout: float) -> TopicRouteData:
        cmd = self._cmd(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, H.GetRouteInfoRequestHeader(topic=topic).to_ext_fields()
        )
        resp = await self._call(namesrv, cmd, timeout)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotExist(resp.code, resp.remark, request_code=cmd.code, addr=namesrv)
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, namesrv)
        if not resp.body:
            raise ProtocolError(f"route answer for {topic!r} from {namesrv} has no body")
        return TopicRouteData.decode(resp.body)

    # -- sending ---------------------------------------------------------------------------------

    async def send(
        self,
        addr: str,
        mq: MessageQueue,
        header: H.SendMessageRequestHeader,
        body: bytes,
        timeout: float,
        *,
        batch: bool = False,
        oneway: bool = False,
        msg_id: str | None = None,
        reply: bool = False,
    ) -> SendResult | None:
        """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE, or SEND_REPLY_MESSAGE_V2 for a reply (``MSG_TYPE=
        reply``, as ``sendKernelImpl`` picks it). ``msg_id`` is the UNIQ_KEY (comma-joined for a batch)."""
        if reply:
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        else:
            code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        cmd = self._cmd(code, header.to_v2_ext_fields(), body, oneway=oneway)
        if oneway:
            await self.pool.oneway(addr, cmd)
            return None
        resp = await self._call(addr, cmd, timeout)
        status = _SEND_STATUS.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise self._fail(resp, cmd, addr)
        rh = H.SendMessageResponseHeader.from_ext_fields(resp.ext_fields)
        real_mq = MessageQueue(mq.topic, mq.broker_name, rh.queue_id)
        uniq = msg_id or (_uniq_key_of(header.properties) if not batch else None)
        return SendResult(
            status=status,
            msg_id=uniq or rh.transaction_id or rh.msg_id,
            offset_msg_id=rh.msg_id,
            message_queue=real_mq,
            queue_offset=rh.queue_offset,
            transaction_id=rh.transaction_id,
            region_id=resp.ext_fields.get("MSG_REGION") or "DefaultRegion",  # processSendResponse
            trace_on=resp.ext_fields.get("TRACE_ON") != "false",
        )

    async def end_transaction(
        self, addr: str, header: EndTransactionRequestHeader, remark: str | None, timeout: float
    ) -> None:
        """END_TRANSACTION (37), oneway as Java's ``endTransactionOneway``: the broker answers nothing,
        so a lost or refused end is resolved by its check-back. ``remark`` says why the local
        transaction failed (Java's ``executeLocalTransactionBranch exception: ...``)."""
        cmd = self._cmd(RequestCode.END_TRANSACTION, header.to_ext_fields(), oneway=True)
        cmd.remark = remark
        await self.pool.oneway(addr, cmd, timeout)

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        max_num: int,
        begin_ms: int,
        end_ms: int,
        timeout: float,
        *,
        unique_key: bool = False,
    ) -> list[MessageExt]:
        """QUERY_MESSAGE (12) by key (``MQClientAPIImpl.queryMessage``): the stored messages of
        ``topic`` indexed under ``key`` in ``[begin_ms, end_ms]``; none found (22): ``[]``."""
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": str(begin_ms),
            "endTimestamp": str(end_ms),
            # always sent, as the Java client does (a 4.9.8 ACL broker then refuses the signature)
            "_UNIQUE_KEY_QUERY": "true" if unique_key else "false",
        }
        cmd = self._cmd(RequestCode.QUERY_MESSAGE, java_map_order(ext))
        resp = await self._call(addr, cmd, timeout)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return list(decode_messages(resp.body or b""))

    async def consumer_send_msg_back(
        self, addr: str, header: H.ConsumerSendMsgBackRequestHeader, timeout: float
    ) -> None:
        cmd = self._cmd(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())
        await self._expect_ok(addr, cmd, timeout)

    # -- pulling ---------------------------------------------------------------------------------

    async def pull(
        self,
        addr: str,
        header: H.PullMessageRequestHeader,
        timeout: float,
        *,
        broker_name: str,
        decode: bool = True,
    ) -> PullResult:
        """``decode=False`` leaves the stored messages undecoded in ``body`` (the Spark source builds
        Arrow columns from it). The request is written from the queue's
        :class:`~rmq_async.protocol.pull.PullTemplate` (made by its first pull; the same bytes as the
        command, in a sixth of the time), and coalesced (see :meth:`Connection.request`): the pulls
        that the queues' loops send in one turn of the event loop go out in one write, after the
        consume tasks the answers just read have woken."""
        h = header
        key = (self.settings, _pull_key(h))
        templates = self._pull_templates
        template = templates.get(key)
        if template is None:
            if len(templates) >= _PULL_TEMPLATES_MAX:
                templates.clear()  # (subscriptions changed many times over: start again)
            template = templates[key] = PullTemplate(pull_request(self.settings, header))
        pull = PreparedPull(template, h.queue_offset, h.max_msg_nums, h.commit_offset, h.sys_flag)
        resp = await self.pool.request(addr, pull, timeout, coalesce=True)
        got = read_pull_answer(resp.code, resp.ext_fields, resp.remark)
        if isinstance(got, PullRefused):
            raise broker_error(got.code, got.remark, pull.code, pull.command().ext_fields, addr)
        msgs: list[MessageExt] = []
        if got.status is PullStatus.FOUND and resp.body and decode:
            try:
                msgs = decode_messages(resp.body, broker_name=broker_name)
            except BrokenBodyError as exc:  # where the queue goes on: the consumer can step past it
                exc.next_begin_offset = got.next_begin_offset
                raise
        return PullResult(
            status=got.status,
            next_begin_offset=got.next_begin_offset,
            min_offset=got.min_offset,
            max_offset=got.max_offset,
            suggest_which_broker_id=got.suggest_which_broker_id,
            messages=msgs,
            remark=resp.remark,
            body=b"" if decode else resp.body,
            received_ns=resp.received_ns,
        )

    # -- offsets ---------------------------------------------------------------------------------

    async def query_consumer_offset(
        self, addr: str, header: H.QueryConsumerOffsetRequestHeader, timeout: float
    ) -> int | None:
        """The committed offset, or None when the broker has none (22 QUERY_NOT_FOUND)."""
        cmd = self._cmd(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext_fields())
        resp = await self._call(addr, cmd, timeout)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return H.QueryConsumerOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def update_consumer_offset(
        self, addr: str, header: H.UpdateConsumerOffsetRequestHeader, timeout: float, *, oneway: bool = True
    ) -> None:
        cmd = self._cmd(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields(), oneway=oneway)
        if oneway:
            await self.pool.oneway(addr, cmd)
        else:
            await self._expect_ok(addr, cmd, timeout)

    async def get_max_offset(self, addr: str, mq: MessageQueue, timeout: float) -> int:
        h = H.GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name)
        resp = await self._expect_ok(addr, self._cmd(RequestCode.GET_MAX_OFFSET, h.to_ext_fields()), timeout)
        return H.GetMaxOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def get_min_offset(self, addr: str, mq: MessageQueue, timeout: float) -> int:
        h = H.GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name)
        resp = await self._expect_ok(addr, self._cmd(RequestCode.GET_MIN_OFFSET, h.to_ext_fields()), timeout)
        return H.GetMinOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout: float) -> int:
        h = H.SearchOffsetRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms, bname=mq.broker_name
        )
        resp = await self._expect_ok(
            addr, self._cmd(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, h.to_ext_fields()), timeout
        )
        return H.SearchOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset

    async def get_earliest_msg_storetime(self, addr: str, mq: MessageQueue, timeout: float) -> int:
        h = H.GetEarliestMsgStoretimeRequestHeader(topic=mq.topic, queue_id=mq.queue_id, bname=mq.broker_name)
        resp = await self._expect_ok(
            addr, self._cmd(RequestCode.GET_EARLIEST_MSG_STORETIME, h.to_ext_fields()), timeout
        )
        return H.GetEarliestMsgStoretimeResponseHeader.from_ext_fields(resp.ext_fields).timestamp

    async def view_message(self, addr: str, commit_log_offset: int, timeout: float) -> MessageExt:
        h = H.ViewMessageRequestHeader(offset=commit_log_offset)
        resp = await self._expect_ok(
            addr, self._cmd(RequestCode.VIEW_MESSAGE_BY_ID, h.to_ext_fields()), timeout
        )
        msgs = decode_messages(resp.body)
        if not msgs:
            if msgs.undecodable:  # it is there but cannot be decoded: say why, not "no message"
                raise UndecodableMessageError(msgs.undecodable[0])
            raise ProtocolError(f"VIEW_MESSAGE_BY_ID answer from {addr} has no message")
        return msgs[0]

    # -- membership ------------------------------------------------------------------------------

    async def heartbeat(self, addr: str, data: HeartbeatData, timeout: float) -> RemotingCommand:
        cmd = self._cmd(RequestCode.HEART_BEAT, None, data.encode())
        return await self._expect_ok(addr, cmd, timeout)

    async def check_client_config(
        self, addr: str, group: str, client_id: str, sub: SubscriptionData, timeout: float
    ) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46), ``MQClientAPIImpl.checkClientInBroker``: the SUCCESS answer (its
        ``version`` is the broker's); :class:`BrokerError` for any other."""
        body = CheckClientRequestBody(client_id=client_id, group=group, subscription_data=sub)
        cmd = self._cmd(RequestCode.CHECK_CLIENT_CONFIG, None, body.encode())
        return await self._expect_ok(addr, cmd, timeout)

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        timeout: float,
        *,
        producer_group: str | None = None,
        consumer_group: str | None = None,
    ) -> None:
        h = H.UnregisterClientRequestHeader(
            client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        await self._expect_ok(addr, self._cmd(RequestCode.UNREGISTER_CLIENT, h.to_ext_fields()), timeout)

    async def get_consumer_id_list(self, addr: str, group: str, timeout: float) -> list[str]:
        h = H.GetConsumerListByGroupRequestHeader(consumer_group=group)
        resp = await self._expect_ok(
            addr, self._cmd(RequestCode.GET_CONSUMER_LIST_BY_GROUP, h.to_ext_fields()), timeout
        )
        if not resp.body:
            return []
        return list(GetConsumerListByGroupResponseBody.decode(resp.body).consumer_id_list)

    # -- admin -----------------------------------------------------------------------------------

    async def create_topic(
        self, addr: str, topic: str, queues: int, timeout: float, *, perm: int = 6, order: bool = False
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC (17, Java ``createTopic`` with ``CreateTopicRequestHeader``) on one
        broker: ``queues`` read and write queues, permission ``perm`` (6: read and write)."""
        ext = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "true" if order else "false",
        }
        await self._expect_ok(addr, self._cmd(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), timeout)

    async def get_consumer_running_info(
        self, addr: str, group: str, client_id: str, timeout: float, *, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO (307, Java ``getConsumerRunningInfo``) of one member of ``group``,
        which the broker forwards to it."""
        h = H.GetConsumerRunningInfoRequestHeader(
            consumer_group=group, client_id=client_id, jstack_enable=jstack
        )
        resp = await self._expect_ok(
            addr, self._cmd(RequestCode.GET_CONSUMER_RUNNING_INFO, h.to_ext_fields()), timeout
        )
        if not resp.body:
            raise ProtocolError(f"running info of {client_id} from {addr}: an empty answer")
        return ConsumerRunningInfo.decode(resp.body)

    async def set_message_request_mode(
        self, addr: str, topic: str, group: str, mode: str, pop_share_queue_num: int, timeout: float
    ) -> None:
        """SET_MESSAGE_REQUEST_MODE (401, Java ``setMessageRequestMode``): POP or PULL for ``group`` on
        ``topic`` at one broker."""
        body = encode_set_mode(topic, group, mode, pop_share_queue_num)
        await self._expect_ok(addr, self._cmd(RequestCode.SET_MESSAGE_REQUEST_MODE, None, body), timeout)

    # -- POP (5.x) -------------------------------------------------------------------------------

    async def query_assignment(
        self, addr: str, topic: str, group: str, client_id: str, strategy: str, model: str, timeout: float
    ) -> list[Assignment] | None:
        """QUERY_ASSIGNMENT (400, Java ``queryAssignment``): the broker's assignment of ``topic``'s
        queues to this client; None from a broker that does not know the request (4.x)."""
        body = encode_query_assignment(topic, group, client_id, strategy, model)
        cmd = self._cmd(RequestCode.QUERY_ASSIGNMENT, None, body)
        resp = await self._call(addr, cmd, timeout)
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return decode_assignments(resp.body)

    async def pop_message(
        self, addr: str, header: PopMessageRequestHeader, timeout: float
    ) -> tuple[PopMessageResponseHeader, bytes] | None:
        """POP_MESSAGE (200050, Java ``popMessageAsync``): the answer's header and body; None when
        nothing came in the poll time (POLLING_TIMEOUT, or PULL_NOT_FOUND)."""
        cmd = self._cmd(RequestCode.POP_MESSAGE, header.to_ext_fields())
        resp = await self._call(addr, cmd, timeout)
        if resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise self._fail(resp, cmd, addr)
        return PopMessageResponseHeader.from_ext_fields(resp.ext_fields), resp.body

    async def ack_message(self, addr: str, header: AckMessageRequestHeader, timeout: float) -> None:
        """ACK_MESSAGE (200051, Java ``ackMessageAsync``) of one popped message."""
        await self._expect_ok(addr, self._cmd(RequestCode.ACK_MESSAGE, header.to_ext_fields()), timeout)

    async def change_invisible_time(
        self, addr: str, header: ChangeInvisibleTimeRequestHeader, timeout: float
    ) -> ChangeInvisibleTimeResponseHeader:
        """CHANGE_MESSAGE_INVISIBLETIME (200053, Java ``changeInvisibleTimeAsync``): the new handle's
        parts (pop time, invisible time, revive queue)."""
        cmd = self._cmd(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext_fields())
        resp = await self._expect_ok(addr, cmd, timeout)
        return ChangeInvisibleTimeResponseHeader.from_ext_fields(resp.ext_fields)

    # -- orderly locks ---------------------------------------------------------------------------

    async def lock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: Sequence[MessageQueue], timeout: float
    ) -> set[MessageQueue]:
        body = LockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=list(mqs)).encode()
        resp = await self._expect_ok(addr, self._cmd(RequestCode.LOCK_BATCH_MQ, None, body), timeout)
        if not resp.body:
            return set()
        return set(LockBatchResponseBody.decode(resp.body).lock_ok_mq_set)

    async def unlock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Sequence[MessageQueue],
        timeout: float,
        *,
        oneway: bool = False,
    ) -> None:
        body = UnlockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=list(mqs)).encode()
        cmd = self._cmd(RequestCode.UNLOCK_BATCH_MQ, None, body, oneway=oneway)
        if oneway:
            await self.pool.oneway(addr, cmd)
        else:
            await self._expect_ok(addr, cmd, timeout)


def _uniq_key_of(properties: str | None) -> str | None:
    if not properties:
        return None
    marker = "UNIQ_KEY\x01"
    i = properties.find(marker)
    if i < 0 or (i > 0 and properties[i - 1] != "\x02"):
        return None
    j = properties.find("\x02", i)
    return properties[i + len(marker) : j if j >= 0 else None]
