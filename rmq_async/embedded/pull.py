"""PULL_MESSAGE (11): ``PullMessageProcessor``.

Strategy: the handler follows the Java processor step by step (topic, queue id, the subscription from
the request or from the group's heartbeat, subVersion check, store lookup, status to code mapping, the
piggy-backed commit offset). A suspendable pull that finds nothing is parked in the context's
:class:`~.holds.HoldService` with the handler's re-run entry, which answers it without parking it
again once a message arrives or its suspend time is over. A found answer's body is the list of
commit-log slices the store returns, written without joining them.
"""

from __future__ import annotations

from ..protocol.codes import PullSysFlag, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from .context import BrokerContext, HandlerTable
from .fields import opt_int, opt_str, req_int, req_str
from .filters import FilterData, is_tag_type, message_filter
from .groups import Subscription, build_subscription
from .holds import HeldPull
from .jcompat import faq_suffix
from .server import Connection, Reply
from .state import RETRY_PREFIX

__all__ = ["handlers"]

_STATUS_CODE = {
    "FOUND": ResponseCode.SUCCESS,
    "NO_MATCHED_MESSAGE": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_FOUND_NULL": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": ResponseCode.PULL_OFFSET_MOVED,
    "OFFSET_OVERFLOW_ONE": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_TOO_SMALL": ResponseCode.PULL_OFFSET_MOVED,
    "MESSAGE_WAS_REMOVING": ResponseCode.PULL_RETRY_IMMEDIATELY,
}


def handlers(ctx: BrokerContext) -> HandlerTable:
    store, state, consumers, holds = ctx.store, ctx.state, ctx.consumers, ctx.holds
    respond, find_group = ctx.respond, ctx.find_group
    flavour = ctx.settings.flavour
    faq = faq_suffix(flavour)
    filters = ctx.filters
    property_filter = ctx.settings.enable_property_filter
    support_retry = ctx.settings.filter_support_retry
    #: a 4.x broker with filterSupportRetry checks the messages of retry topics on the commit log
    retry_filtered = support_retry and flavour != 5

    def pull_message(conn: Connection, cmd: RemotingCommand, allow_suspend: bool = True) -> Reply:
        """Process one pull; None when it was parked (answered later) or is oneway."""
        group = req_str(cmd, "consumerGroup")
        topic = req_str(cmd, "topic")
        queue_id = req_int(cmd, "queueId")
        offset = req_int(cmd, "queueOffset")
        max_nums = req_int(cmd, "maxMsgNums")
        sys_flag = req_int(cmd, "sysFlag")
        commit_offset = req_int(cmd, "commitOffset")
        suspend_ms = req_int(cmd, "suspendTimeoutMillis")
        sub_version = opt_int(cmd, "subVersion", 0) or 0
        has_suspend = bool(sys_flag & PullSysFlag.SUSPEND)
        has_commit = bool(sys_flag & PullSysFlag.COMMIT_OFFSET)
        has_sub = bool(sys_flag & PullSysFlag.SUBSCRIPTION)
        empty: dict[str, str] = {}

        def fail(code: int, remark: str) -> RemotingCommand:
            return respond(cmd, code, remark, empty)

        find_group(group)
        tc = state.topics.get(topic)
        if tc is None:
            return fail(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please! {faq}",
            )
        if not tc.perm & 4:
            return fail(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read:
            return fail(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read}] "
                f"consumer:[/{conn.addr}]",
            )
        sub: Subscription | None
        fdata: FilterData | None = None
        if has_sub:
            try:
                sub = build_subscription(topic, opt_str(cmd, "subscription"), opt_str(cmd, "expressionType"))
            except ValueError:
                return fail(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
                )
            if not is_tag_type(sub.expression_type):
                # Java asserts it is not null; assertions are off in production, so an expression that
                # does not compile filters nothing here (the client's CHECK_CLIENT_CONFIG refused it)
                fdata = filters.build(topic, group, sub.sub_string, sub.expression_type, sub_version)
        else:
            g = consumers.get(group)
            if g is None:
                return fail(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    "the consumer's group info not exist" + faq,
                )
            sub = g.subs.get(topic)
            if sub is None:
                return fail(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    "the consumer's subscription not exist" + faq,
                )
            if sub.version < sub_version:
                return fail(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            if not is_tag_type(sub.expression_type):
                fdata = filters.get(topic, group)
                if fdata is None:
                    return fail(
                        ResponseCode.FILTER_DATA_NOT_EXIST,
                        "The broker's consumer filter data is not exist!Your expression may be wrong!",
                    )
                if fdata.client_version < sub_version:
                    return fail(
                        ResponseCode.FILTER_DATA_NOT_LATEST, "the consumer's consumer filter data not latest"
                    )
        etype = sub.expression_type
        tag = etype == "TAG" or not etype  # ExpressionType.isTagType, inline: every pull passes here
        if not tag and not property_filter:
            return fail(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}",
            )
        accept = None
        if tag and not (retry_filtered and topic.startswith(RETRY_PREFIX)):
            res = store.get(topic, queue_id, offset, max_nums, sub.codes, runs=True)  # the hot path
        else:
            accept = message_filter(
                sub, fdata, filters, group, support_retry=support_retry, flavour=filters.flavour
            )
            res = store.get(topic, queue_id, offset, max_nums, sub.codes, runs=True, accept=accept)
        ext = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(res.next_begin),
            "minOffset": str(res.min_offset),
            "maxOffset": str(res.max_offset),
        }
        if flavour == 5:
            ext["topicSysFlag"] = str(tc.sys_flag)
            ext["groupSysFlag"] = "0"
        status = res.status
        if status in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"):
            code: int = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _STATUS_CODE[status]
        answer = respond(cmd, code, status, ext)
        resp: Reply = answer
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
            holds.hold(topic, queue_id, HeldPull(conn, cmd, offset, suspend_ms, sub.codes, rerun, accept))
            resp = None
        elif code == ResponseCode.SUCCESS:
            resp = (answer, res.parts)  # the body: slices of the commit log
        if allow_suspend and has_commit:
            state.commit_offset(group, topic, queue_id, commit_offset)
        return resp

    def rerun(conn: Connection, cmd: RemotingCommand) -> Reply:
        try:
            return pull_message(conn, cmd, False)
        except Exception as exc:  # pragma: no cover - a bad header was refused before parking
            return respond(cmd, ResponseCode.SYSTEM_ERROR, str(exc))

    return {RequestCode.PULL_MESSAGE: pull_message}
