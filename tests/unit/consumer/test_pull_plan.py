"""PullPlanner and FlowControl on their own: no event loop, no clock, no sleeps. Example tests walk
each branch of the pull loop's decisions (flow control, the sink's gate, subscription, route, the
request's fields, every pull status, every failure, the narrowing past a broken body); a hypothesis
state machine drives a planner against a real ProcessQueue and a model broker as the loop would, and
checks after every step that no request goes out for a dropped queue or one over a threshold, that
the pulled offsets only move forward until the broker says the offset is illegal, that an illegal
offset always ends in a drop (push) or the proposed offset (lite pull), that every back-off is
positive and bounded, and that ACL refusals back off as the loop always has."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.helpers_stored import encode_stored

import rmq_async.consumer.pull_plan as pull_plan
from rmq_async.client.api import PullResult, PullStatus
from rmq_async.config import ConsumerConfig, Timing
from rmq_async.consumer.context import Subscriptions
from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.consumer.pull_plan import (
    AUTH_MAX_BACKOFF,
    BROKEN_BODY_LIMIT,
    BROKEN_BODY_SKIP_AT,
    Advance,
    Backoff,
    Deliver,
    Drop,
    FlowControl,
    Handle,
    Narrowing,
    Phase,
    PullPlanner,
    PullRequestPlan,
    Skip,
    Step,
    Why,
    filter_tags,
)
from rmq_async.consumer.pulling import PullSettings
from rmq_async.errors import AuthError, BrokerError, ProtocolError, RequestTimeout, RocketMQError
from rmq_async.protocol.codes import PullSysFlag, ResponseCode
from rmq_async.protocol.filter import SQL92, Selector
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import BrokenBodyError, MessageExt, PulledMessages, Undecodable

MQ = MessageQueue("T", "b", 0)
MASTER, SLAVE = "127.0.0.1:10911", "127.0.0.1:10921"
D = Timing().pull_error_delay  # the Java timing: 3 s
BATCH = 16


class _Route:
    """The client's address table, as ClientInstance answers ``findBrokerAddressInSubscribe``."""

    def __init__(self, addrs: dict[int, str] | None = None) -> None:
        self.broker_addrs: dict[str, dict[int, str]] = {
            "b": {0: MASTER, 1: SLAVE} if addrs is None else addrs
        }

    def broker_addr(self, broker_name: str, broker_id: int = 0) -> str | None:
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        return addrs.get(broker_id) or addrs.get(0) or next(iter(addrs.values()))


def _push(config: ConsumerConfig | None = None) -> PullSettings:
    return PullSettings.for_push(config or ConsumerConfig(group="g", pull_batch_size=BATCH), Timing())


def _lite() -> PullSettings:
    return PullSettings.for_lite_pull(BATCH, Timing())


def _subs(expr: str | Selector | None = "*") -> Subscriptions:
    subs = Subscriptions(None)
    if expr is not None:
        subs.put("T", expr)
    return subs


def _planner(
    s: PullSettings | None = None,
    *,
    subs: Subscriptions | None = None,
    route: _Route | None = None,
    gates: bool = False,
    to_dlq: bool = True,
    pq: ProcessQueue | None = None,
) -> tuple[PullPlanner, ProcessQueue]:
    plan = PullPlanner(
        MQ,
        "g",
        s or _push(),
        FlowControl(D),
        route or _Route(),
        _subs() if subs is None else subs,
        gates=gates,
        to_dlq=to_dlq,
    )
    if pq is None:
        pq = ProcessQueue(MQ)
        pq.next_offset = 0
    return plan, pq


def _request(plan: PullPlanner, pq: ProcessQueue, now: float = 0.0) -> PullRequestPlan:
    step = plan.next(now, pq)
    assert type(step) is PullRequestPlan, step
    return step


def _msgs(first: int, tags: list[str]) -> list[MessageExt]:
    return [MessageExt("T", b"x", properties={"TAGS": t}, queue_offset=first + k) for k, t in enumerate(tags)]


def _found(first: int, tags: list[str], suggest: int = 0) -> PullResult:
    return PullResult(PullStatus.FOUND, first + len(tags), 0, first + len(tags), suggest, _msgs(first, tags))


def _answer(status: PullStatus, next_begin: int, remark: str | None = None) -> PullResult:
    return PullResult(status, next_begin, 0, 100, 0, [], remark)


def _broken(
    index: int = 0, next_begin: int = -1, body: bytes = b"junk", rec: Undecodable | None = None
) -> BrokenBodyError:
    exc = BrokenBodyError("stored message at offset 0: broken", rec, index=index, body=body)
    exc.next_begin_offset = next_begin
    return exc


def _bad_magic(queue_offset: int, *, phys: int = 7000) -> bytes:
    m = bytearray(encode_stored(topic="T", body=b"x", queue_offset=queue_offset, commit_log_offset=phys))
    m[4:8] = b"\0\0\0\0"
    return bytes(m)


def _fail_until_broken(plan: PullPlanner, exc: RocketMQError, times: int) -> object:
    """``times`` failures of the pull at the current offset; what the last one says."""
    then: object = None
    for _ in range(times):
        assert plan.on_error(exc) is Step.BROKEN
        then = plan.on_broken(exc)
    return then


# -- the module is sans-IO --------------------------------------------------------------------------


def test_the_planner_imports_no_event_loop_clock_or_socket() -> None:
    tree = ast.parse(Path(pull_plan.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    io = {"asyncio", "anyio", "time", "socket", "selectors", "threading", "..transport"}
    assert not {n for n in names if n.split(".")[0] in io or n.startswith("..transport")}, names


# -- flow control -------------------------------------------------------------------------------------


def test_flow_control_stops_a_dropped_queue_and_waits_over_a_threshold() -> None:
    plan, pq = _planner(pq=ProcessQueue(MQ, max_count=2))
    pq.put(_msgs(0, ["A", "A", "A"]))
    assert plan.next(0.0, pq) is Step.WAIT  # cached count 3 > 2
    pq.remove(pq.messages()[:1])
    assert type(plan.next(0.0, pq)) is PullRequestPlan
    pq.drop()
    assert plan.next(0.0, pq) is Step.STOP


@pytest.mark.parametrize("limit", ["bytes", "span"])
def test_flow_control_waits_over_the_size_and_span_thresholds(limit: str) -> None:
    pq = ProcessQueue(MQ, max_bytes=10) if limit == "bytes" else ProcessQueue(MQ, max_span=5)
    plan, _ = _planner(pq=pq)
    pq.put([MessageExt("T", b"x" * 11, queue_offset=0), MessageExt("T", b"x", queue_offset=9)])
    assert plan.next(0.0, pq) is Step.WAIT


def test_the_pop_loops_share_the_room_and_the_error_delay() -> None:
    flow = FlowControl(D)
    assert (flow.room(False, False), flow.room(False, True), flow.room(True, False)) == (
        Step.GO,
        Step.WAIT,
        Step.STOP,
    )
    assert flow.failed() == Backoff(D, Why.FAILED)


def test_the_gate_is_awaited_before_every_pull() -> None:
    plan, pq = _planner(gates=True)
    assert plan.next(0.0, pq) is Step.GATE
    plan.gated(False)  # not now: flow control and the gate again
    assert plan.next(0.0, pq) is Step.GATE
    plan.gated(True)
    phases = [plan.phase]
    _request(plan, pq)
    assert [*phases, plan.phase] == [Phase.READY, Phase.FLOW] and plan.next(0.0, pq) is Step.GATE


def test_an_unsubscribed_topic_is_pulled_again_later(caplog: pytest.LogCaptureFixture) -> None:
    plan, pq = _planner(subs=_subs(None))
    with caplog.at_level(logging.DEBUG, "rmq_async.consumer"):
        assert plan.next(0.0, pq) == Backoff(D, Why.NO_SUBSCRIPTION)
    assert "no subscription for T: pulling again later" in caplog.text
    lite, pq = _planner(_lite(), subs=_subs(None))  # assign mode: pulled with *
    assert _request(lite, pq).header.subscription == "*"


def test_a_broker_without_an_address_refreshes_the_route_then_backs_off() -> None:
    route = _Route({})
    plan, pq = _planner(route=route)
    assert plan.next(0.0, pq) is Step.ROUTE
    assert plan.next(0.0, pq) == Backoff(D, Why.NO_ROUTE)  # still none after the refresh
    assert plan.next(0.0, pq) is Step.ROUTE
    route.broker_addrs["b"] = {1: SLAVE}  # the refresh found one: any node of the broker
    assert _request(plan, pq).addr == SLAVE and plan.phase is Phase.FLOW


# -- the request --------------------------------------------------------------------------------------


def test_the_committed_offset_rides_along_to_the_master_only() -> None:
    plan, pq = _planner()
    flags = (
        PullSysFlag.build(commit_offset=False, suspend=True, subscription=False),
        PullSysFlag.build(commit_offset=True, suspend=True, subscription=False),
    )
    first = _request(plan, pq, now=5.0)
    assert (first.addr, first.header.sys_flag, first.header.commit_offset) == (MASTER, flags[0], 0)
    assert plan.sent_at == 5.0
    pq.offset.value, pq.next_offset = 7, 9
    h = _request(plan, pq).header
    assert (h.queue_offset, h.sys_flag, h.commit_offset) == (9, flags[1], 7)
    plan.on_result(_answer(PullStatus.NO_NEW_MSG, 9), 0.0, pq)  # stays on the master
    plan.broker_id = 1  # a slave suggested: it must not take the commit
    to_slave = _request(plan, pq)
    assert (to_slave.addr, to_slave.header.sys_flag, to_slave.header.commit_offset) == (SLAVE, flags[0], 0)


def test_lite_pull_and_broadcasting_never_send_a_committed_offset() -> None:
    for s in (_lite(), _push(ConsumerConfig(group="g", message_model="BROADCASTING"))):
        plan, pq = _planner(s)
        pq.offset.value = 7
        assert _request(plan, pq).header.commit_offset == 0


def test_the_subscription_fields_of_push_and_lite_pull() -> None:
    push, pq = _planner(_push(), subs=_subs("A || B"))
    h = _request(push, pq).header
    sub = push.subscriptions.get("T")
    assert sub is not None and h.sub_version == sub.sub_version and h.subscription is None
    posted, pq = _planner(_push(ConsumerConfig(group="g", post_subscription_when_pull=True)), subs=_subs("A"))
    assert _request(posted, pq).header.subscription == "A"
    lite, pq = _planner(_lite(), subs=_subs("A"))
    h = _request(lite, pq).header
    assert (h.sub_version, h.subscription, h.expression_type) == (0, "A", "TAG")
    sql = _subs(Selector.sql("a > 1"))
    lite, pq = _planner(_lite(), subs=sql)
    h = _request(lite, pq).header
    sub = sql.get("T")
    assert sub is not None and (h.sub_version, h.expression_type) == (sub.sub_version, SQL92)


# -- the answer ---------------------------------------------------------------------------------------


def test_found_delivers_the_tag_filtered_batch_and_its_latency() -> None:
    plan, pq = _planner(subs=_subs("A"))
    _request(plan, pq, now=10.0)
    res = _found(0, ["A", "B", "A"], suggest=1)
    got = plan.on_result(res, 10.25, pq)
    assert type(got) is Deliver and got.found is res.messages
    assert [m.queue_offset for m in got.msgs] == [0, 2] and got.next_offset == 3
    assert got.latency == 0.25 and got.undecodable == () and plan.broker_id == 1
    got.clear()  # the loop lets go of the batch
    assert got.found == [] and got.msgs == []
    every, pq = _planner()
    _request(every, pq)
    res = _found(0, ["A", "B"])
    d = every.on_result(res, 0.0, pq)
    assert type(d) is Deliver and d.msgs is res.messages  # no copy without a tag filter


def test_found_carries_what_the_decoder_could_not_decode() -> None:
    plan, pq = _planner()
    _request(plan, pq)
    batch = PulledMessages()
    batch.extend(_msgs(0, ["A"]))
    rec = Undecodable("T", 0, 1, 100, 50, 0, 0, "", None, "bad body")
    batch.undecodable = (rec,)
    got = plan.on_result(PullResult(PullStatus.FOUND, 2, 0, 2, 0, batch), 0.0, pq)
    assert type(got) is Deliver and got.undecodable == (rec,)


@pytest.mark.parametrize("status", [PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG])
def test_nothing_new_moves_an_empty_queue_s_committed_offset(status: PullStatus) -> None:
    plan, pq = _planner()
    _request(plan, pq)
    got = plan.on_result(_answer(status, 5), 0.0, pq)
    assert type(got) is Advance and (got.next_offset, got.commit) == (5, True)  # correctTagsOffset
    pq.put(_msgs(0, ["A"]))
    got = plan.on_result(_answer(status, 5), 0.0, pq)
    assert type(got) is Advance and not got.commit  # messages held: the consume path commits
    lite, pq = _planner(_lite())
    _request(lite, pq)
    got = lite.on_result(_answer(status, 5), 0.0, pq)
    assert type(got) is Advance and not got.commit


def test_an_illegal_offset_drops_a_push_queue_and_moves_a_lite_one(caplog: pytest.LogCaptureFixture) -> None:
    plan, pq = _planner()
    pq.next_offset = 90
    _request(plan, pq)
    with caplog.at_level(logging.WARNING, "rmq_async.consumer"):
        assert plan.on_result(_answer(PullStatus.OFFSET_ILLEGAL, 40, "moved"), 0.0, pq) == Drop(40)
    assert "at 90: offset illegal (moved), moving to 40" in caplog.text
    lite, pq = _planner(_lite())
    _request(lite, pq)
    got = lite.on_result(_answer(PullStatus.OFFSET_ILLEGAL, 40), 0.0, pq)
    assert type(got) is Advance and (got.next_offset, got.commit) == (40, False)


def test_an_answer_for_a_queue_dropped_meanwhile_stops_the_loop() -> None:
    plan, pq = _planner()
    _request(plan, pq)
    pq.drop()
    assert plan.on_result(_found(0, ["A"], suggest=1), 0.0, pq) is Step.STOP
    assert plan.broker_id == 1  # still taken, as before the check


# -- failures -----------------------------------------------------------------------------------------


def test_acl_refusals_back_off_doubling_and_are_forgotten_once_allowed() -> None:
    plan, pq = _planner()
    _request(plan, pq)
    denied = AuthError(16, "no permission", resource="topic:T")
    waits = [plan.on_error(denied) for _ in range(5)]
    assert waits == [Backoff(s, Why.DENIED) for s in (6.0, 12.0, 24.0, AUTH_MAX_BACKOFF, AUTH_MAX_BACKOFF)]
    assert plan.denied == 5 and plan.allowed() == "topic:T" and plan.denied == 0
    assert plan.on_error(denied) == Backoff(6.0, Why.DENIED)  # counted from one again


@pytest.mark.parametrize(
    "code",
    [
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        ResponseCode.FILTER_DATA_NOT_EXIST,
        ResponseCode.FILTER_DATA_NOT_LATEST,
    ],
)
def test_a_refused_subscription_asks_for_a_heartbeat(code: int) -> None:
    plan, pq = _planner()
    _request(plan, pq)
    assert plan.on_error(BrokerError(code, "not latest")) is Step.HEARTBEAT
    assert plan.heartbeat(True) == Backoff(0.05, Why.RESUBSCRIBED)  # one went out since the pull
    assert plan.heartbeat(False) == Backoff(D, Why.FAILED)  # one per heartbeat interval at most


def test_other_failures_back_off_the_error_delay(caplog: pytest.LogCaptureFixture) -> None:
    plan, pq = _planner()
    _request(plan, pq)
    with caplog.at_level(logging.WARNING, "rmq_async.consumer"):
        assert plan.on_error(BrokerError(1, "system busy")) == Backoff(D, Why.FAILED)
        assert plan.on_error(RequestTimeout(11, MASTER, 30.0)) == Backoff(D, Why.FAILED)
    assert caplog.text.count("failed:") == 2


def test_a_refused_answer_that_is_not_the_body_s_fault_is_only_retried() -> None:
    plan, pq = _planner()
    _request(plan, pq)
    err = ProtocolError("a header field is missing")
    waits = [_fail_until_broken(plan, err, 1) for _ in range(5)]
    assert waits == [Backoff(s, Why.BROKEN_BODY) for s in (6.0, 12.0, 24.0, 30.0, 30.0)]  # cap: 10 delays
    assert plan.broken == 5 and plan.plan.header.max_msg_nums == BATCH


def test_a_broken_body_is_narrowed_to_the_good_ones_then_the_broken_one_alone() -> None:
    plan, pq = _planner()
    pq.next_offset = 3
    _request(plan, pq)
    wide = _broken(index=2)
    assert _fail_until_broken(plan, wide, BROKEN_BODY_LIMIT) is Step.AGAIN
    narrowings = [plan.narrowing]
    assert plan.plan.header.max_msg_nums == 2
    assert _request(plan, pq).header.queue_offset == 3
    plan.on_result(_found(3, ["A", "A"]), 0.0, pq)  # the two before it
    assert plan.plan.header.max_msg_nums == 1 and (plan.broken, plan.broken_at) == (BROKEN_BODY_LIMIT, 5)
    pq.next_offset = 5
    _request(plan, pq)
    plan.on_result(_found(5, ["A"]), 0.0, pq)  # it decoded after all: full pulls again
    narrowings.append(plan.narrowing)
    assert plan.plan.header.max_msg_nums == BATCH
    assert narrowings == [Narrowing.GOOD_ONES_FIRST, Narrowing.FULL]


def test_a_broken_first_message_is_pulled_alone() -> None:
    plan, pq = _planner()
    _request(plan, pq)
    assert _fail_until_broken(plan, _broken(index=0), BROKEN_BODY_LIMIT) is Step.AGAIN
    assert plan.plan.header.max_msg_nums == 1 and plan.narrowing is Narrowing.NARROWED


def test_a_broken_message_with_sound_ids_is_handled_by_its_offset() -> None:
    plan, pq = _planner()
    pq.next_offset = 3
    _request(plan, pq)
    _fail_until_broken(plan, _broken(index=0), BROKEN_BODY_LIMIT)
    then = plan.on_broken(_broken(next_begin=4, body=_bad_magic(3, phys=4321)))  # the fourth, alone
    assert isinstance(then, Handle) and then.next_offset == 4
    rec = then.record
    assert (rec.topic, rec.queue_offset, rec.commit_log_offset, rec.broker_name) == ("T", 3, 4321, "b")
    assert rec.reason.startswith("broken framing: ") and plan.plan.header.max_msg_nums == BATCH


def test_a_broken_message_the_decoder_named_keeps_its_record() -> None:
    plan, pq = _planner()
    pq.next_offset = 3
    _request(plan, pq)
    named = Undecodable(None, 0, 3, 555, 90, 0, 0, "", None, "bad magic")
    then = _fail_until_broken(plan, _broken(index=0, rec=named), BROKEN_BODY_LIMIT + 1)
    assert isinstance(then, Handle) and then.next_offset == 4
    assert then.record.commit_log_offset == 555 and then.record.reason == "broken framing: bad magic"


def test_a_broken_message_nothing_names_backs_off_then_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    plan, pq = _planner()
    pq.next_offset = 5
    _request(plan, pq)
    plan.plan.header.max_msg_nums = 1  # (narrowed already)
    plan.narrowing = Narrowing.NARROWED
    alone = _broken(next_begin=6, body=_bad_magic(9))  # its ids name offset 9: not the pulled one
    with caplog.at_level(logging.ERROR, "rmq_async.consumer"):
        waits = [_fail_until_broken(plan, alone, 1) for _ in range(BROKEN_BODY_SKIP_AT - 1)]
    assert waits[BROKEN_BODY_LIMIT - 1 :] == [Backoff(s, Why.BROKEN_BODY) for s in (24.0, 30.0, 30.0)]
    assert caplog.text.count("it cannot be moved to the DLQ") == BROKEN_BODY_SKIP_AT - BROKEN_BODY_LIMIT
    then = _fail_until_broken(plan, alone, 1)
    assert isinstance(then, Skip) and (then.offset, then.next_offset) == (5, 6)
    assert then.why == f"its pull was refused {BROKEN_BODY_SKIP_AT} times"
    assert then.record.commit_log_offset == -1 and "its ids are not the pulled ones" in then.record.reason
    assert plan.plan.header.max_msg_nums == BATCH


def test_lite_pull_handles_a_broken_message_nothing_names_at_once() -> None:
    plan, pq = _planner(_lite(), to_dlq=False)
    pq.next_offset = 3
    _request(plan, pq)
    plan.plan.header.max_msg_nums = 1
    then = _fail_until_broken(plan, _broken(next_begin=4, body=b"short"), BROKEN_BODY_LIMIT)
    assert isinstance(then, Handle) and then.next_offset == 4
    assert then.record.commit_log_offset == -1 and "its fixed part does not read" in then.record.reason


def test_filter_tags() -> None:
    sub = _subs("A || C").get("T")
    assert sub is not None
    msgs = _msgs(0, ["A", "B", "C"])
    assert [m.tags for m in filter_tags(sub, msgs)] == ["A", "C"]
    every = _subs("*").get("T")
    assert every is not None and filter_tags(every, msgs) is msgs


# -- properties ---------------------------------------------------------------------------------------


@given(
    delay=st.floats(0.001, 60.0),
    times=st.integers(1, 10_000),
)
def test_every_back_off_is_positive_and_bounded(delay: float, times: int) -> None:
    flow = FlowControl(delay)
    top = max(delay, AUTH_MAX_BACKOFF)
    for b in (flow.failed(), flow.denied(times), flow.broken(times), flow.resubscribed()):
        assert 0 < b.seconds <= top
    assert flow.denied(times).seconds == min(AUTH_MAX_BACKOFF, delay * 2 ** min(times, 8))
    assert flow.broken(times).seconds <= 10 * delay and flow.resubscribed().seconds <= 0.05


_ANSWERS = st.sampled_from(
    ["found", "no_new", "no_matched", "illegal", "denied", "behind", "busy", "timeout", "protocol", "broken"]
)


class PlannerModel(RuleBasedStateMachine):
    """The loop's side of the planner, with a real ProcessQueue (small thresholds) and a broker that
    answers what it is asked; the loop's awaits are the rules in between."""

    def __init__(self) -> None:
        super().__init__()
        self.lite = False
        self._start(0)

    def _start(self, offset: int) -> None:
        self.pq = ProcessQueue(MQ, max_count=20, max_bytes=10**9, max_span=30)
        self.pq.next_offset = offset
        self.route = _Route()
        self.subs = _subs("A || B")
        settings = _lite() if self.lite else _push()
        self.plan = PullPlanner(
            MQ, "g", settings, FlowControl(D), self.route, self.subs, gates=True, to_dlq=not self.lite
        )
        self.last = offset  # the offset of the last request since the last illegal offset
        self.tags: list[str] = []  # the tags of the last request's subscription
        self.denials = 0

    @rule(lite=st.booleans(), offset=st.integers(0, 1000))
    def restart(self, lite: bool, offset: int) -> None:
        """A new loop run (a rebalance, a seek): a new planner, a new queue."""
        self.lite = lite
        self._start(offset)

    @rule(data=st.data())
    def consume(self, data: st.DataObject) -> None:
        held = self.pq.messages()
        if held:
            self.pq.remove(held[: data.draw(st.integers(1, len(held)))])

    @rule()
    def drop(self) -> None:
        self.pq.drop()

    @rule(expr=st.sampled_from(["*", "A", None]))
    def resubscribe(self, expr: str | None) -> None:
        if expr is None:
            self.subs.remove("T")
        else:
            self.subs.put("T", expr)

    @rule(gone=st.booleans())
    def route_changes(self, gone: bool) -> None:
        self.route.broker_addrs["b"] = {} if gone else {0: MASTER, 1: SLAVE}

    @rule(gate=st.booleans(), answer=_ANSWERS, data=st.data())
    def pull(self, gate: bool, answer: str, data: st.DataObject) -> None:
        pq, plan = self.pq, self.plan
        for _ in range(4):  # at most: GATE, ROUTE, then the request or a back-off
            step = plan.next(0.0, pq)
            if step is Step.GATE:
                assert pq.over_threshold() is None and not pq.dropped
                plan.gated(gate)
                if not gate:
                    return
            elif step is Step.ROUTE:
                if data.draw(st.booleans()):
                    self.route.broker_addrs["b"] = {0: MASTER}
            elif step is Step.WAIT:
                assert pq.over_threshold() is not None
                return
            elif step is Step.STOP:
                assert pq.dropped
                return
            elif type(step) is Backoff:
                assert step.reason in (Why.NO_SUBSCRIPTION, Why.NO_ROUTE) and step.seconds == D
                return
            else:
                assert type(step) is PullRequestPlan
                self._answer(step, answer, data)
                return
        raise AssertionError("the planner went round without a decision")

    def _answer(self, req: PullRequestPlan, answer: str, data: st.DataObject) -> None:
        pq, plan = self.pq, self.plan
        # never a request for a dropped queue or one over a threshold
        assert not pq.dropped and pq.over_threshold() is None
        h = req.header
        assert h.queue_offset == pq.next_offset >= self.last  # forward only
        self.last = h.queue_offset
        sub = self.subs.get("T")
        self.tags = sub.tags_set if sub is not None else []
        at, width = h.queue_offset, h.max_msg_nums
        if answer in ("found", "no_new", "no_matched", "illegal"):
            res = self._result(answer, at, width, data)
            if plan.denied:
                plan.allowed()
            self.denials = 0
            self._apply(plan.on_result(res, 1.0, pq), res, at)
        else:
            self._fail(self._error(answer, at, data))

    def _result(self, answer: str, at: int, width: int, data: st.DataObject) -> PullResult:
        if answer == "found":
            n = data.draw(st.integers(1, width))
            tags = data.draw(st.lists(st.sampled_from("ABC"), min_size=n, max_size=n))
            return _found(at, tags)
        if answer == "illegal":
            return _answer(PullStatus.OFFSET_ILLEGAL, data.draw(st.integers(0, 2000)))
        status = PullStatus.NO_NEW_MSG if answer == "no_new" else PullStatus.NO_MATCHED_MSG
        return _answer(status, at + data.draw(st.integers(0, 5)))

    def _apply(self, got: object, res: PullResult, at: int) -> None:
        pq = self.pq
        if res.status is PullStatus.OFFSET_ILLEGAL:
            # always the drop (push, a rebalance starts the queue there) or the proposed offset
            if self.lite:
                assert type(got) is Advance and got.next_offset == res.next_begin_offset and not got.commit
                pq.next_offset = self.last = got.next_offset
            else:
                assert got == Drop(res.next_begin_offset)
                self._start(res.next_begin_offset)
            return
        if type(got) is Deliver:
            assert res.status is PullStatus.FOUND and got.found is res.messages
            # filtered with the subscription the pull was made with
            wanted = set(self.tags)
            assert got.msgs == ([m for m in got.found if m.tags in wanted] if wanted else got.found)
            assert got.latency == 1.0
            pq.next_offset = got.next_offset
            if got.msgs and not self.lite:
                pq.put(got.msgs)
            got.clear()
        else:
            assert type(got) is Advance and not (got.commit and (self.lite or pq.count))
            pq.next_offset = got.next_offset
        assert pq.next_offset == res.next_begin_offset >= at

    def _error(self, answer: str, at: int, data: st.DataObject) -> RocketMQError:
        if answer == "denied":
            return AuthError(16, "no permission", resource="topic:T")
        if answer == "behind":
            return BrokerError(ResponseCode.SUBSCRIPTION_NOT_LATEST, "not latest")
        if answer == "busy":
            return BrokerError(ResponseCode.SYSTEM_BUSY, "busy")
        if answer == "timeout":
            return RequestTimeout(11, MASTER, 30.0)
        if answer == "protocol":
            return ProtocolError("a header field is missing")
        exc = _broken(index=data.draw(st.integers(0, 20)), next_begin=at + data.draw(st.integers(-1, 3)))
        if data.draw(st.booleans()):  # a record the decoder could read
            exc.record = Undecodable("T", 0, at, 100, 50, 0, 0, "", None, "bad magic")
        return exc

    def _fail(self, exc: RocketMQError) -> None:
        plan, pq = self.plan, self.pq
        step = plan.on_error(exc)
        if isinstance(exc, AuthError):
            self.denials += 1
            # as the loop always did: doubling from twice the error delay, up to 30 s
            assert step == Backoff(min(AUTH_MAX_BACKOFF, D * 2 ** min(self.denials, 8)), Why.DENIED)
            return
        if step is Step.HEARTBEAT:
            step = plan.heartbeat(False)
        elif step is Step.BROKEN:
            then = plan.on_broken(exc)
            if isinstance(then, Handle | Skip):
                assert then.next_offset > pq.next_offset
                pq.next_offset = then.next_offset
                return
            if then is Step.AGAIN:
                return
            step = then
        assert type(step) is Backoff and 0 < step.seconds <= AUTH_MAX_BACKOFF

    @invariant()
    def the_width_is_one_to_a_batch(self) -> None:
        width = self.plan.plan.header.max_msg_nums
        assert 1 <= width <= BATCH
        assert (width == BATCH) == (self.plan.narrowing is Narrowing.FULL)

    @invariant()
    def between_pulls_flow_control_comes_first(self) -> None:
        assert self.plan.phase is Phase.FLOW

    @precondition(lambda self: self.pq.dropped)
    @invariant()
    def a_dropped_queue_is_never_pulled(self) -> None:
        assert self.plan.next(0.0, self.pq) is Step.STOP


PlannerModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_planner_model = PlannerModel.TestCase
