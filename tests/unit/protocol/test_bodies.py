"""Bodies against the captured frames (4.9.8 and 5.3.3): values, and byte-identical re-encoding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, Frame, pairs

from rmq_async.errors import ProtocolError
from rmq_async.protocol import fastjson
from rmq_async.protocol.bodies import (
    BrokerData,
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
    DataVersion,
    GetConsumerListByGroupResponseBody,
    GetConsumerStatusBody,
    HeartbeatData,
    JsonBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProcessQueueInfo,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    ResetOffsetBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from rmq_async.protocol.fastjson import ObjectKeyMap
from rmq_async.protocol.mq import MessageQueue

# request code -> (class of the request body, class of the code-0 answer body)
_BODIES: dict[int, tuple[type[JsonBody] | None, type[JsonBody] | None]] = {
    34: (HeartbeatData, None),
    105: (None, TopicRouteData),
    41: (LockBatchRequestBody, LockBatchResponseBody),
    42: (UnlockBatchRequestBody, None),
    38: (None, GetConsumerListByGroupResponseBody),
    220: (ResetOffsetBody, None),
    221: (None, GetConsumerStatusBody),
    309: (None, ConsumeMessageDirectlyResult),
    307: (None, ConsumerRunningInfo),
}


def _bodies(file: str) -> list[tuple[Frame, type[JsonBody]]]:
    out = []
    for req, resp in pairs(file):
        want_req, want_resp = _BODIES.get(req.code, (None, None))
        if want_req is not None and req.body_len:
            out.append((req, want_req))
        if want_resp is not None and resp is not None and resp.code == 0 and resp.body_len:
            out.append((resp, want_resp))
    return out


def _decoded(file: str, cls: type[JsonBody]) -> list[Any]:
    return [cls.decode(fr.body) for fr, c in _bodies(file) if c is cls]


@pytest.mark.parametrize("file", CAPTURE_FILES)
def test_captured_bodies_decode_and_reencode_byte_identically(file: str) -> None:
    found = _bodies(file)
    for fr, cls in found:
        body = cls.decode(fr.body)
        assert body.encode() == fr.body, (fr.seq, cls.__name__)
        assert cls.decode(body.encode()) == body
    assert found


def test_every_body_class_appears_in_the_captures() -> None:
    seen = {cls for f in CAPTURE_FILES for _, cls in _bodies(f)}
    assert seen == {c for pair in _BODIES.values() for c in pair if c is not None}


# -- heartbeat ------------------------------------------------------------------------------------


def test_tags_filter_heartbeat_carries_hash_codes() -> None:
    hb = _decoded("tags-filter.jsonl", HeartbeatData)[0]
    subs = {s.topic: s for cd in hb.consumer_data_set for s in cd.subscription_data_set}
    tags = subs["WireTags"]
    assert tags.sub_string == "TagA || TagC" and tags.tags_set == ["TagA", "TagC"]
    assert tags.code_set == [2598919, 2598921] and tags.expression_type == "TAG"
    assert subs["%RETRY%wire_tags_cg"].sub_string == "*" and subs["%RETRY%wire_tags_cg"].code_set == []
    tagx = next(h for h in _decoded("tags-filter.jsonl", HeartbeatData) if h.client_id == "127.0.0.1@tagx-1")
    (sub,) = [s for s in tagx.consumer_data_set[0].subscription_data_set if s.topic == "WireTags"]
    assert (sub.tags_set, sub.code_set) == (["TagX"], [2598942])


def test_unicode_tags_heartbeat() -> None:
    hb = _decoded("compressed-unicode.jsonl", HeartbeatData)[0]
    sub = next(s for s in hb.consumer_data_set[0].subscription_data_set if s.topic == "WireZipUtf8")
    assert set(sub.tags_set) == {"TagZip", "标签中文", "TagKeys"}
    assert set(sub.code_set) == {-1797378745, 824391569, 115383438}
    assert "标签中文".encode() in hb.encode()  # raw UTF-8, as fastjson writes it


def test_heartbeat_shapes() -> None:
    push = _decoded("push-concurrently.jsonl", HeartbeatData)[0]
    cd = push.consumer_data_set[0]
    assert push.client_id == "127.0.0.1@push-1"
    assert (cd.consume_type, cd.message_model, cd.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    assert push.producer_data_set == [ProducerData(group_name="CLIENT_INNER_PRODUCER")]
    assert push.heartbeat_fingerprint is None and push.without_sub is None
    assert _decoded("broadcast.jsonl", HeartbeatData)[0].consumer_data_set[0].message_model == "BROADCASTING"
    lite = [h for h in _decoded("lite-pull.jsonl", HeartbeatData) if h.client_id == "127.0.0.1@lite-2@STREAM"]
    assert lite and lite[0].consumer_data_set[0].subscription_data_set == []  # assign mode
    assert lite[0].consumer_data_set[0].consume_type == "CONSUME_ACTIVELY"


def test_heartbeat_flavours() -> None:
    v5 = _decoded("v5-push.jsonl", HeartbeatData)[0]
    assert (v5.heartbeat_fingerprint, v5.without_sub) == (0, False)
    v4 = _decoded("push-concurrently.jsonl", HeartbeatData)[0]
    assert b"heartbeatFingerprint" not in v4.encode()
    as5 = fastjson.loads(v4.encode(flavour5=True))
    assert list(as5) == [
        "clientID",
        "consumerDataSet",
        "heartbeatFingerprint",
        "producerDataSet",
        "withoutSub",
    ]
    assert (as5["heartbeatFingerprint"], as5["withoutSub"]) == (0, False)
    hb = HeartbeatData(client_id="127.0.0.1@me", producer_data_set=[ProducerData(group_name="pg")])
    assert (
        hb.encode()
        == b'{"clientID":"127.0.0.1@me","consumerDataSet":[],"producerDataSet":[{"groupName":"pg"}]}'
    )
    sub = SubscriptionData(topic="T", sub_string="*", sub_version=5)
    cd = ConsumerData(
        group_name="g",
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        subscription_data_set=[sub],
    )
    assert fastjson.loads(HeartbeatData(client_id="c", consumer_data_set=[cd]).encode())[
        "consumerDataSet"
    ] == [
        {
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "consumeType": "CONSUME_PASSIVELY",
            "groupName": "g",
            "messageModel": "CLUSTERING",
            "subscriptionDataSet": [
                {
                    "classFilterMode": False,
                    "codeSet": [],
                    "expressionType": "TAG",
                    "subString": "*",
                    "subVersion": 5,
                    "tagsSet": [],
                    "topic": "T",
                }
            ],
            "unitMode": False,
        }
    ]


# -- route ----------------------------------------------------------------------------------------


def _route(file: str, topic: str) -> TopicRouteData:
    for req, resp in pairs(file):
        if (
            req.code == 105
            and req.header["extFields"]["topic"] == topic
            and resp is not None
            and resp.code == 0
        ):
            return TopicRouteData.decode(resp.body)
    raise AssertionError(topic)


def test_route_values() -> None:
    tbw = _route("send.jsonl", "TBW102")
    (qd,) = tbw.queue_datas
    assert (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm, qd.topic_sys_flag) == (
        "broker-a",
        8,
        8,
        7,
        0,
    )
    (bd,) = tbw.broker_datas
    assert bd.broker_addrs == {0: "127.0.0.1:10911"} and bd.cluster == "DefaultCluster"
    assert bd.select_broker_addr() == "127.0.0.1:10911" and bd.enable_acting_master is None
    assert tbw.filter_server_table == {} and tbw.order_topic_conf is None
    dlq = _route("dlq.jsonl", "%DLQ%wire_dlq_cg")
    assert (dlq.queue_datas[0].read_queue_nums, dlq.queue_datas[0].perm) == (1, 6)
    v5 = _route("v5-send.jsonl", "TBW102")
    assert v5.broker_datas[0].enable_acting_master is False
    assert v5.broker_datas[0].broker_addrs == {0: "127.0.0.1:10931"}
    # The 4.9.8 name server's form for this broker, and the 5.x form of the same route.
    assert b'"enableActingMaster"' not in tbw.encode()
    assert b'"enableActingMaster":false' in tbw.encode(flavour5=True)


def test_route_accepts_unquoted_keys_and_the_old_flag_name() -> None:
    text = (
        b'{"brokerDatas":[{"brokerAddrs":{1:"127.0.0.1:10921",0:"127.0.0.1:10911"},"brokerName":"b",'
        b'"cluster":"C"}],"filterServerTable":{"127.0.0.1:10911":["f1"]},"orderTopicConf":"b:4",'
        b'"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"topicSynFlag":3,"writeQueueNums":4}],'
        b'"topicQueueMappingByBroker":{"b":{"x":1}}}'
    )
    route = TopicRouteData.decode(text)
    assert route.broker_datas[0].broker_addrs == {1: "127.0.0.1:10921", 0: "127.0.0.1:10911"}
    assert route.broker_datas[0].select_broker_addr() == "127.0.0.1:10911"
    assert route.queue_datas[0].topic_sys_flag == 3
    assert route.filter_server_table == {"127.0.0.1:10911": ["f1"]} and route.order_topic_conf == "b:4"
    out = route.encode()
    assert b'"topicSysFlag":3' in out and b'{"1":"127.0.0.1:10921","0":"127.0.0.1:10911"}' in out
    assert TopicRouteData.decode(out) == route


def test_select_broker_addr_without_master() -> None:
    assert BrokerData(cluster="c", broker_name="b", broker_addrs={2: "x", 1: "y"}).select_broker_addr() == "x"
    assert BrokerData(cluster="c", broker_name="b").select_broker_addr() is None


# -- locks, consumer lists ---------------------------------------------------------------------------


def test_lock_bodies() -> None:
    reqs = _decoded("orderly-rebalance.jsonl", LockBatchRequestBody)
    answers = _decoded("orderly-rebalance.jsonl", LockBatchResponseBody)
    assert all(isinstance(mq, MessageQueue) for r in reqs for mq in r.mq_set)
    assert reqs[0].consumer_group == "wire_ordreb_cg" and reqs[0].only_this_broker is None
    assert any(a.lock_ok_mq_set == [] for a in answers)  # another client held the queue
    assert any(a.lock_ok_mq_set for a in answers)
    assert LockBatchResponseBody().encode() == b'{"lockOKMQSet":[]}'
    v5 = _decoded("v5-orderly.jsonl", LockBatchRequestBody)[0]
    assert v5.only_this_broker is False
    unlock = _decoded("v5-orderly.jsonl", UnlockBatchRequestBody)[0]
    assert MessageQueue("%RETRY%wire_order_cg", "broker-a", 0) in unlock.mq_set and len(unlock.mq_set) == 5
    body = LockBatchRequestBody(consumer_group="g", client_id="c", mq_set=[MessageQueue("T", "b", 1)])
    assert body.encode() == (
        b'{"clientId":"c","consumerGroup":"g","mqSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    )
    assert body.encode(flavour5=True).endswith(b',"onlyThisBroker":false}')


def test_consumer_id_lists() -> None:
    lists = _decoded("push-concurrently.jsonl", GetConsumerListByGroupResponseBody)
    assert ["127.0.0.1@push-1"] in [x.consumer_id_list for x in lists]
    assert any(len(x.consumer_id_list) == 2 for x in lists)  # while push-2 was a member


# -- broker to client (admin) ---------------------------------------------------------------------------


def test_reset_offset_and_consumer_status_bodies() -> None:
    (reset,) = _decoded("admin-tools.jsonl", ResetOffsetBody)
    assert reset.offset_table == {MessageQueue("WireTools", "broker-a", q): 0 for q in (3, 0, 1, 2)}
    assert next(iter(reset.offset_table)).queue_id == 3  # wire order kept
    (status,) = _decoded("admin-tools.jsonl", GetConsumerStatusBody)
    assert status.message_queue_table == {MessageQueue("WireTools", "broker-a", q): 5 for q in range(4)}
    assert status.consumer_table == {}
    built = GetConsumerStatusBody(
        message_queue_table={MessageQueue("T", "b", 0): 9},
        consumer_table={"c1": {MessageQueue("T", "b", 1): 4}},
    )
    assert built.encode() == (
        b'{"consumerTable":{"c1":{{"brokerName":"b","queueId":1,"topic":"T"}:4}},'
        b'"messageQueueTable":{{"brokerName":"b","queueId":0,"topic":"T"}:9}}'
    )
    assert GetConsumerStatusBody.decode(built.encode()) == built


def test_consume_message_directly_result() -> None:
    (res,) = _decoded("admin-tools.jsonl", ConsumeMessageDirectlyResult)
    assert (res.order, res.auto_commit, res.consume_result, res.remark, res.spent_time_mills) == (
        False,
        True,
        "CR_SUCCESS",
        None,
        125,
    )
    later = ConsumeMessageDirectlyResult(consume_result="CR_LATER", remark="boom", spent_time_mills=3)
    assert later.encode() == (
        b'{"autoCommit":true,"consumeResult":"CR_LATER","order":false,"remark":"boom","spentTimeMills":3}'
    )


def _shape(value: Any) -> Any:
    """Keys and nesting, not values (object keys reduced to their key names)."""
    if isinstance(value, ObjectKeyMap):
        return ("objmap", tuple(sorted(value[0][0])) if value else (), _shape(value[0][1]) if value else None)
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def test_consumer_running_info_has_the_java_shape() -> None:
    (captured_frame,) = [fr for fr, cls in _bodies("admin-running-info.jsonl") if cls is ConsumerRunningInfo]
    info = ConsumerRunningInfo.decode(captured_frame.body)
    mq = MessageQueue("WireHB", "broker-a", 3)
    assert info.mq_table[mq].commit_offset == 2 and info.mq_table[mq].locked is True
    assert info.status_table["WireHB"] == ConsumeStatus()
    assert info.properties["consumerGroup"] == "wire_admin_cg" and info.jstack is None
    assert [s.topic for s in info.subscription_set] == ["%RETRY%wire_admin_cg", "WireHB"]

    # Our own answer, built in another order: encode sorts the Java TreeMaps/TreeSet.
    ours = ConsumerRunningInfo(
        properties={"consumerGroup": "wire_admin_cg", "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
        subscription_set=[
            SubscriptionData(topic="WireHB", sub_string="*", sub_version=2),
            SubscriptionData(topic="%RETRY%wire_admin_cg", sub_string="*", sub_version=1),
        ],
        mq_table={
            MessageQueue("WireHB", "broker-a", 1): ProcessQueueInfo(commit_offset=4, locked=True),
            MessageQueue("%RETRY%wire_admin_cg", "broker-a", 0): ProcessQueueInfo(),
        },
        status_table={
            "WireHB": ConsumeStatus(pull_rt=1.5, pull_tps=2.0, consume_failed_msgs=1),
            "%RETRY%wire_admin_cg": ConsumeStatus(),
        },
    )
    got = fastjson.loads(ours.encode())
    want = fastjson.loads(captured_frame.body)
    assert all(isinstance(v, str) for v in got["properties"].values())  # a java.util.Properties
    got["properties"] = want["properties"] = {}  # its keys are whatever the client chooses to report
    assert _shape(got) == _shape(want)
    assert [k["topic"] for k, _ in got["mqTable"]] == ["%RETRY%wire_admin_cg", "WireHB"]
    assert list(got["statusTable"]) == ["%RETRY%wire_admin_cg", "WireHB"]
    assert [s["topic"] for s in got["subscriptionSet"]] == ["%RETRY%wire_admin_cg", "WireHB"]
    assert b'"pullRT":1.5,"pullTPS":2.0' in ours.encode()
    assert ConsumerRunningInfo.decode(ours.encode()).mq_table == ours.mq_table
    assert b'"jstack":"trace"' in ours.model_copy(update={"jstack": "trace"}).encode()


# -- broker registration --------------------------------------------------------------------------------


def test_register_broker_body() -> None:
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={
                "TBW102": TopicConfig(topic_name="TBW102", read_queue_nums=8, write_queue_nums=8, perm=7),
                "WireHB": TopicConfig(topic_name="WireHB", read_queue_nums=4, write_queue_nums=4),
            },
            data_version=DataVersion(timestamp=1795300000000, counter=3),
        )
    )
    assert body.encode() == (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
        b'"timestamp":1795300000000},"topicConfigTable":{"TBW102":{"order":false,"perm":7,"readQueueNums":8,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8},'
        b'"WireHB":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        b'"topicName":"WireHB","topicSysFlag":0,"writeQueueNums":4}}}}'
    )
    assert RegisterBrokerBody.decode(body.encode()) == body
    # A 5.x broker's additions are accepted.
    v5 = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"stateVersion":0,'
        b'"timestamp":5},"mappingDataVersion":{"counter":0},"topicConfigTable":{"T":{"attributes":{},'
        b'"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T",'
        b'"topicSysFlag":0,"writeQueueNums":4}},"topicQueueMappingInfoMap":{}}}'
    )
    got = RegisterBrokerBody.decode(v5)
    assert got.topic_config_serialize_wrapper.topic_config_table["T"].attributes == {}
    assert got.topic_config_serialize_wrapper.data_version.state_version == 0


# -- errors and properties ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "body", "match"),
    [
        (TopicRouteData, b"not json", "TopicRouteData: fastjson: expected a value at position 0"),
        (TopicRouteData, b"[1]", "TopicRouteData: expected a JSON object"),
        (TopicRouteData, b'{"queueDatas":[{"brokerName":"b"}]}', "TopicRouteData: invalid body"),
        (HeartbeatData, b'{"consumerDataSet":[]}', "HeartbeatData: invalid body"),
        (LockBatchResponseBody, b'{"lockOKMQSet":[{"topic":"T"}]}', "LockBatchResponseBody: invalid body"),
        (ResetOffsetBody, b'{"offsetTable":[1]}', "ResetOffsetBody: invalid body"),
        (ResetOffsetBody, b'{"offsetTable":{{"topic":"T"}:1}}', "ResetOffsetBody: invalid body"),
        (QueueData, b'{"brokerName":"b","perm":"x","readQueueNums":1,"writeQueueNums":1}', "QueueData"),
        (
            GetConsumerListByGroupResponseBody,
            b"\xff",
            "GetConsumerListByGroupResponseBody: fastjson: invalid",
        ),
    ],
)
def test_bad_bodies_raise_protocol_error(cls: type[JsonBody], body: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        cls.decode(body)


_names = st.text(st.characters(codec="utf-8"), max_size=8)
_mqs = st.builds(MessageQueue, _names, _names, st.integers(0, 2**31 - 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(_mqs, max_size=6), _names, _names, st.none() | st.booleans())
def test_lock_body_round_trip(mqs: list[MessageQueue], group: str, client: str, only: bool | None) -> None:
    body = UnlockBatchRequestBody(consumer_group=group, client_id=client, mq_set=mqs, only_this_broker=only)
    assert UnlockBatchRequestBody.decode(body.encode()) == body


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_mqs, st.integers(-(2**63), 2**63 - 1), max_size=6))
def test_reset_offset_round_trip(table: dict[MessageQueue, int]) -> None:
    body = ResetOffsetBody(offset_table=table)
    back = ResetOffsetBody.decode(body.encode())
    assert list(back.offset_table.items()) == list(table.items())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.builds(
            QueueData,
            broker_name=_names,
            read_queue_nums=st.integers(0, 1024),
            write_queue_nums=st.integers(0, 1024),
            perm=st.integers(0, 15),
            topic_sys_flag=st.integers(0, 3),
        ),
        max_size=3,
    ),
    st.dictionaries(st.integers(0, 16), _names, max_size=3),
    st.none() | st.booleans(),
)
def test_route_round_trip(queues: list[QueueData], addrs: dict[int, str], acting: bool | None) -> None:
    route = TopicRouteData(
        queue_datas=queues,
        broker_datas=[
            BrokerData(cluster="c", broker_name="b", broker_addrs=addrs, enable_acting_master=acting)
        ],
    )
    assert TopicRouteData.decode(route.encode()) == route
