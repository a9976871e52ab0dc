"""Typed headers against the captured frames (4.9.8 and 5.3.3), plus property round trips."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, Frame, pairs

from rmq_async.errors import ProtocolError
from rmq_async.protocol import headers as H
from rmq_async.protocol.codes import RequestCode, SerializeType
from rmq_async.protocol.command import RemotingCommand, decode_frame
from rmq_async.protocol.headers import (
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    ConsumerSendMsgBackRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    Header,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetResponseHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    java_map_order,
)

_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
_PULL_ANSWERS = (0, 19, 20, 21)
# Stream clients (pull, lite pull) add this marker with an RPC hook; it is no header field.
_REQ_T = "ReqT"


def _headed_frames(file: str) -> list[tuple[Frame, type[Header], bool, bool]]:
    """(frame, header class, is V2 send, frame is a request) for every frame a class here reads."""
    out = []
    for req, resp in pairs(file):
        cls = REQUEST_HEADERS.get(req.code)
        if cls is not None:
            out.append((req, cls, req.code in _V2_CODES, True))
        rcls = RESPONSE_HEADERS.get(req.code)
        if rcls is not None and resp is not None:
            ok = _PULL_ANSWERS if req.code == RequestCode.PULL_MESSAGE else (0,)
            if resp.code in ok:
                out.append((resp, rcls, False, False))
    return out


def _read(cls: type[Header], ext: dict[str, str], v2: bool) -> Header:
    if v2:
        assert cls is SendMessageRequestHeader
        return SendMessageRequestHeader.from_v2_ext_fields(ext)
    return cls.from_ext_fields(ext)


def _write(h: Header, v2: bool) -> dict[str, str]:
    if v2:
        assert isinstance(h, SendMessageRequestHeader)
        return h.to_v2_ext_fields()
    return h.to_ext_fields()


@pytest.mark.parametrize("file", CAPTURE_FILES)
def test_captured_headers_round_trip(file: str) -> None:
    checked = ordered = 0
    for fr, cls, v2, _ in _headed_frames(file):
        ext: dict[str, str] = fr.header.get("extFields", {})
        h = _read(cls, ext, v2)
        out = _write(h, v2)
        assert out == {k: v for k, v in ext.items() if k != _REQ_T}, (fr.seq, cls.__name__)
        assert _read(cls, out, v2) == h
        checked += 1
        if fr.serialize != "JSON":
            continue  # the binary header writes FastCodesHeader fields in declaration order
        if _REQ_T in ext:
            # The stream clients' RPC hook adds ReqT before the header fields go in.
            out = java_map_order({_REQ_T: ext[_REQ_T], **out})
        if isinstance(h, SendMessageResponseHeader) and file.startswith("v5-"):
            # 5.3.3's addExtField pre-sizes the broker's map to 256, and MSG_REGION/TRACE_ON go in first.
            out = java_map_order({**h.extra, **{k: v for k, v in out.items() if k not in h.extra}}, 256)
        assert list(out) == list(ext), (fr.seq, cls.__name__)  # so the JSON header is byte-identical
        ordered += 1
    assert checked > 0
    assert ordered > 0 or file.startswith("binary-")


def test_every_captured_header_class_is_exercised() -> None:
    seen: set[str] = set()
    for f in CAPTURE_FILES:
        seen.update(cls.__name__ for _, cls, _, _ in _headed_frames(f))
    assert {
        "GetRouteInfoRequestHeader",
        "PullMessageRequestHeader",
        "PullMessageResponseHeader",
        "SendMessageRequestHeader",
        "SendMessageResponseHeader",
        "QueryConsumerOffsetRequestHeader",
        "QueryConsumerOffsetResponseHeader",
        "UpdateConsumerOffsetRequestHeader",
        "ConsumerSendMsgBackRequestHeader",
        "GetConsumerListByGroupRequestHeader",
        "NotifyConsumerIdsChangedRequestHeader",
        "UnregisterClientRequestHeader",
        "GetMaxOffsetRequestHeader",
        "GetMaxOffsetResponseHeader",
        "GetMinOffsetRequestHeader",
        "GetMinOffsetResponseHeader",
        "SearchOffsetRequestHeader",
        "SearchOffsetResponseHeader",
        "GetEarliestMsgStoretimeRequestHeader",
        "GetEarliestMsgStoretimeResponseHeader",
        "ViewMessageRequestHeader",
        "ResetOffsetRequestHeader",
        "GetConsumerStatusRequestHeader",
        "GetConsumerRunningInfoRequestHeader",
        "ConsumeMessageDirectlyResultRequestHeader",
    } <= seen


def _first(file: str, code: int, pred: Any = lambda fr: True, response: bool = False) -> Frame:
    for req, resp in pairs(file):
        fr = resp if response else req
        if req.code == code and fr is not None and pred(fr):
            return fr
    raise AssertionError(f"no frame {code} in {file}")


def test_captured_values_are_typed() -> None:
    lite = _first("lite-pull.jsonl", 11)
    h = PullMessageRequestHeader.from_ext_fields(lite.header["extFields"])
    assert (h.sys_flag, h.sub_version, h.suspend_timeout_millis, h.max_msg_nums) == (22, 0, 20000, 10)
    assert h.subscription == "*" and h.expression_type == "TAG" and h.bname == "broker-a"
    assert h.max_msg_bytes is None

    v5 = PullMessageRequestHeader.from_ext_fields(_first("v5-push.jsonl", 11).header["extFields"])
    assert v5.max_msg_bytes == 262144 and v5.subscription is None
    ans = PullMessageResponseHeader.from_ext_fields(
        _first("v5-push.jsonl", 11, response=True).header["extFields"]
    )
    assert (ans.group_sys_flag, ans.topic_sys_flag, ans.suggest_which_broker_id) == (0, 0, 0)

    zipped = _first("compressed-unicode.jsonl", 310)
    s = SendMessageRequestHeader.from_v2_ext_fields(zipped.header["extFields"])
    assert s.sys_flag == 769 and s.default_topic == "TBW102" and s.producer_group == "wire_ziputf8_pg"
    assert s.batch is False and s.unit_mode is False and s.reconsume_times == 0 and s.bname == "broker-a"
    assert s.max_reconsume_times is None
    uni = SendMessageRequestHeader.from_v2_ext_fields(
        _first("compressed-unicode.jsonl", 310, lambda fr: "上海" in fr.header["extFields"]["i"]).header[
            "extFields"
        ]
    )
    assert uni.properties is not None and "city\x01上海" in uni.properties
    batch = SendMessageRequestHeader.from_v2_ext_fields(_first("send.jsonl", 320).header["extFields"])
    assert batch.batch is True
    # The V1 form of the same header uses the Java names.
    v1 = batch.to_ext_fields()
    assert v1["producerGroup"] == batch.producer_group and v1["batch"] == "true" and "a" not in v1

    sent = SendMessageResponseHeader.from_ext_fields(
        _first("send.jsonl", 310, response=True).header["extFields"]
    )
    assert set(sent.extra) == {"MSG_REGION", "TRACE_ON"} and sent.transaction_id is None
    sent5 = SendMessageResponseHeader.from_ext_fields(
        _first("v5-send.jsonl", 310, response=True).header["extFields"]
    )
    assert sent5.transaction_id and set(sent5.extra) == {"MSG_REGION", "TRACE_ON"}

    back = ConsumerSendMsgBackRequestHeader.from_ext_fields(_first("dlq.jsonl", 36).header["extFields"])
    assert (back.delay_level, back.max_reconsume_times, back.unit_mode) == (1, 2, False)

    reset = ResetOffsetRequestHeader.from_ext_fields(_first("admin-tools.jsonl", 220).header["extFields"])
    assert (reset.is_force, reset.timestamp, reset.queue_id) == (False, 1795316895000, None)
    running = GetConsumerRunningInfoRequestHeader.from_ext_fields(
        _first("admin-running-info.jsonl", 307).header["extFields"]
    )
    assert running.jstack_enable is False and running.client_id == "127.0.0.1@routehb-c"

    unreg = UnregisterClientRequestHeader.from_ext_fields(_first("send.jsonl", 35).header["extFields"])
    assert unreg.client_id.startswith("127.0.0.1@") and unreg.consumer_group is None


def test_to_ext_fields_leaves_out_none_and_writes_java_text() -> None:
    h = PullMessageRequestHeader("g", "T", 1, 2, 32, 2, 0, 15000, 7)
    ext = h.to_ext_fields()
    assert "subscription" not in ext and "bname" not in ext and "maxMsgBytes" not in ext
    assert ext["queueOffset"] == "2" and ext["subVersion"] == "7"
    assert all(isinstance(v, str) for v in ext.values())
    assert GetConsumerRunningInfoRequestHeader("g", "c", True).to_ext_fields()["jstackEnable"] == "true"
    assert UnregisterClientRequestHeader("c", producer_group="p").to_ext_fields() == {
        "producerGroup": "p",
        "clientID": "c",
    }


def test_from_ext_fields_ignores_unknown_keys_and_accepts_java_booleans() -> None:
    h = GetConsumerRunningInfoRequestHeader.from_ext_fields(
        {"consumerGroup": "g", "clientId": "c", "jstackEnable": "TRUE", "lo": "x", "ns": "y"}
    )
    assert h == GetConsumerRunningInfoRequestHeader("g", "c", True)


@pytest.mark.parametrize(
    ("ext", "match"),
    [
        ({"topic": "T", "queueId": "1"}, r"PullMessageRequestHeader: missing required field 'consumerGroup'"),
        (
            {**PullMessageRequestHeader("g", "T", 1, 0, 32, 2, 0, 1, 0).to_ext_fields(), "queueId": "x"},
            r"PullMessageRequestHeader\.queueId: 'x' is not an integer",
        ),
        (
            {
                **PullMessageRequestHeader("g", "T", 1, 0, 32, 2, 0, 1, 0).to_ext_fields(),
                "queueId": "2147483648",
            },
            r"PullMessageRequestHeader\.queueId: 2147483648 does not fit in 32 bits",
        ),
        (
            {**PullMessageRequestHeader("g", "T", 1, 0, 32, 2, 0, 1, 0).to_ext_fields(), "queueOffset": " 5"},
            r"queueOffset: ' 5' is not an integer",
        ),
        (
            {**PullMessageRequestHeader("g", "T", 1, 0, 32, 2, 0, 1, 0).to_ext_fields(), "sysFlag": "1_0"},
            r"sysFlag: '1_0' is not an integer",
        ),
    ],
)
def test_bad_pull_headers_raise(ext: dict[str, str], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        PullMessageRequestHeader.from_ext_fields(ext)


def test_bad_values_of_other_kinds_raise() -> None:
    with pytest.raises(ProtocolError, match=r"GetConsumerRunningInfoRequestHeader\.jstackEnable: 'yes'"):
        GetConsumerRunningInfoRequestHeader.from_ext_fields(
            {"consumerGroup": "g", "clientId": "c", "jstackEnable": "yes"}
        )
    with pytest.raises(
        ProtocolError, match=r"QueryConsumerOffsetResponseHeader\.offset: 9223372036854775808"
    ):
        QueryConsumerOffsetResponseHeader.from_ext_fields({"offset": str(2**63)})
    with pytest.raises(ProtocolError, match="missing required field 'offset'"):
        QueryConsumerOffsetResponseHeader.from_ext_fields({})  # what a 22 QUERY_NOT_FOUND carries
    with pytest.raises(ProtocolError, match="missing required field 'a'"):
        SendMessageRequestHeader.from_v2_ext_fields({"producerGroup": "p"})
    assert QueryConsumerOffsetResponseHeader.from_ext_fields({"offset": "-1"}).offset == -1


def test_v2_keys_follow_the_java_mapping() -> None:
    h = SendMessageRequestHeader(
        "pg", "T", "TBW102", 4, 3, 0, 1795300000000, 0, "KEYS\x01k", 2, True, True, 16, "broker-a"
    )
    assert h.to_v2_ext_fields() == {
        "a": "pg",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1795300000000",
        "h": "0",
        "i": "KEYS\x01k",
        "j": "2",
        "k": "true",
        "l": "16",
        "m": "true",
        "n": "broker-a",
    }
    assert SendMessageRequestHeader.from_ext_fields(h.to_ext_fields()) == h


def test_java_map_order() -> None:
    # A 4.9.8 push consumer's pull, as captured: HashMap order, not declaration order.
    keys = [
        "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag",
        "commitOffset", "suspendTimeoutMillis", "subVersion", "expressionType", "bname",
    ]  # fmt: skip
    assert list(java_map_order(dict.fromkeys(keys, ""))) == [
        "queueId", "maxMsgNums", "sysFlag", "suspendTimeoutMillis", "commitOffset", "bname",
        "topic", "queueOffset", "expressionType", "subVersion", "consumerGroup",
    ]  # fmt: skip
    # 13 keys exceed 0.75 * 16: the table doubles, which changes the order.
    assert len(java_map_order({str(i): "" for i in range(40)})) == 40
    assert list(java_map_order({"b": "", "a": "", "\u4e0a": ""})) == ["a", "b", "\u4e0a"]
    assert list(java_map_order({"IS_SUPPORT_HEART_BEAT_V2": "", "IS_SUB_CHANGE": ""}, 256)) == [
        "IS_SUPPORT_HEART_BEAT_V2",
        "IS_SUB_CHANGE",
    ]


def test_headers_travel_in_both_serializations() -> None:
    h = PullMessageRequestHeader(
        "g", "上海", 1, 2, 32, 3, 5, 15000, 9, "TagA || TagB", "TAG", "broker-a", 262144
    )
    for st_ in (SerializeType.JSON, SerializeType.ROCKETMQ):
        frame = RemotingCommand.request(11, h.to_ext_fields(), serialize_type=st_).encode()
        assert PullMessageRequestHeader.from_ext_fields(decode_frame(frame).ext_fields) == h


# -- hypothesis round trips over every class ---------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=12)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return st.none() | _strategy(inner)
    if typing.get_origin(hint) is typing.Annotated:
        _, kind = typing.get_args(hint)
        bits = 32 if kind == "i32" else 64
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if hint is bool:
        return st.booleans()
    if hint is str:
        return _text
    raise AssertionError(hint)


def _header_classes() -> list[type[Header]]:
    return [
        obj
        for name in H.__all__
        if isinstance(obj := getattr(H, name), type) and issubclass(obj, Header) and obj is not Header
    ]


def _instances(cls: type[Header]) -> st.SearchStrategy[Header]:
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs = {
        f.name: _strategy(hints[f.name])
        for f in dataclasses.fields(typing.cast(Any, cls))
        if f.name != "extra"
    }
    if cls is SendMessageResponseHeader:
        kwargs["extra"] = st.dictionaries(st.sampled_from(["MSG_REGION", "TRACE_ON", "batchUniqId"]), _text)
    return st.builds(cls, **kwargs)


def test_all_classes_are_listed() -> None:
    assert len(_header_classes()) == 31
    assert set(REQUEST_HEADERS.values()) | set(RESPONSE_HEADERS.values()) <= set(_header_classes())


@pytest.mark.parametrize("cls", _header_classes(), ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_round_trip(cls: type[Header], data: st.DataObject) -> None:
    h = data.draw(_instances(cls))
    ext = h.to_ext_fields()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ext.items())
    assert list(ext) == list(java_map_order(ext))
    if cls is not SendMessageResponseHeader:  # the fast path equals the generic one, order included
        assert list(ext.items()) == list(java_map_order(h._pairs(H._specs(cls))).items())
    assert cls.from_ext_fields(ext) == h
    # Through a real frame and back.
    cmd = decode_frame(RemotingCommand.request(0, ext).encode())
    assert cls.from_ext_fields(cmd.ext_fields) == h
    if isinstance(h, SendMessageRequestHeader):
        assert SendMessageRequestHeader.from_v2_ext_fields(h.to_v2_ext_fields()) == h
