"""``protocol.pull``: the PULL_MESSAGE request both shells write (the async client's ``MQClientAPI.pull``
and the Spark reader's pipe) and how an answer is classified (``MQClientAPIImpl.processPullResponse``),
checked against the generic encoder and codec and against the captured Java frames."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import CAPTURE_FILES, frames, pairs

from rmq_async.client.api import MQClientAPI
from rmq_async.errors import ProtocolError
from rmq_async.protocol import headers as H
from rmq_async.protocol.acl import RequestSigner
from rmq_async.protocol.codes import PullSysFlag, RequestCode, ResponseCode, SerializeType
from rmq_async.protocol.command import RemotingCommand, RequestSettings, decode_frame
from rmq_async.protocol.pull import (
    OPEN_FIELDS,
    PULL_STATUS,
    PreparedPull,
    PullAnswer,
    PullRefused,
    PullStatus,
    PullTemplate,
    pull_request,
    read_pull_answer,
)

I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
OPAQUE = st.integers(0, 2**31 - 1)
# names with what a JSON template cuts at: quotes, the keys it looks for, escapes, non-ASCII
NAME = st.one_of(
    st.text(min_size=1, max_size=30),
    st.sampled_from(['"queueOffset":"0"', 'x","maxMsgNums":"1', '"opaque":0,', "\\", "é", "标签"]),
)
SETTINGS = st.builds(
    RequestSettings,
    serialize_type=st.sampled_from(SerializeType),
    language=st.sampled_from(["PYTHON", "JAVA", "GO"]),
    version=st.sampled_from([409, 453]),
    stream=st.booleans(),
)


_NO_COMMIT = PullSysFlag.build(commit_offset=False, suspend=False, subscription=True)


def header(
    offset: int,
    count: int,
    *,
    topic: str = "T",
    group: str = "g",
    sub: str | None = "*",
    commit: int = 0,
    flag: int = _NO_COMMIT,
) -> H.PullMessageRequestHeader:
    return H.PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=3, queue_offset=offset, max_msg_nums=count,
        sys_flag=flag, commit_offset=commit, suspend_timeout_millis=0, sub_version=0, subscription=sub,
        expression_type="TAG", bname="broker-a",
    )  # fmt: skip


def encoded(cmd: RemotingCommand, opaque: int) -> bytes:
    cmd.opaque = opaque
    return cmd.encode()


# -- the request ----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(SETTINGS, NAME, NAME, NAME, I64, I32, OPAQUE)
def test_a_template_frame_is_the_encoding_of_the_same_request(
    s: RequestSettings, topic: str, group: str, sub: str, offset: int, count: int, opaque: int
) -> None:
    t = PullTemplate(pull_request(s, header(0, 1, topic=topic, group=group, sub=sub)))
    want = pull_request(s, header(offset, count, topic=topic, group=group, sub=sub))
    assert want.serialize_type == s.serialize_type
    assert t.frame(offset, count, opaque) == encoded(want, opaque)
    got = t.command(offset, count)
    got.opaque = opaque
    assert got == want


@settings(max_examples=300, deadline=None)
@given(SETTINGS, NAME, st.one_of(st.none(), NAME), I64, I32, I64, I32, OPAQUE)
def test_a_template_writes_any_commit_offset_and_flags(
    s: RequestSettings,
    topic: str,
    sub: str | None,
    offset: int,
    count: int,
    commit: int,
    flag: int,
    opaque: int,
) -> None:
    """The push consumer's pulls: the commit offset and the flags change from pull to pull too."""
    t = PullTemplate(pull_request(s, header(5, 32, topic=topic, sub=sub, commit=7, flag=3)))
    want = pull_request(s, header(offset, count, topic=topic, sub=sub, commit=commit, flag=flag))
    assert t.frame(offset, count, opaque, commit_offset=commit, sys_flag=flag) == encoded(want, opaque)
    prepared = PreparedPull(t, offset, count, commit, flag)
    assert prepared.frame(opaque) == encoded(want, opaque) and prepared.code == RequestCode.PULL_MESSAGE
    got = prepared.command()
    got.opaque = opaque
    assert got == want
    # not given: the base's own values
    base = pull_request(s, header(offset, count, topic=topic, sub=sub, commit=7, flag=3))
    assert t.frame(offset, count, opaque) == encoded(base, opaque)


def test_the_clients_template_key_is_every_field_but_the_open_ones() -> None:
    """MQClientAPI.pull keeps one template per value of the other fields: a field added to the header
    must land in the key (or be opened in the template), never be frozen at its first value."""
    from rmq_async.client import api

    h = header(1, 2, commit=3, flag=4)
    ext = h.to_ext_fields()
    open_attrs = ["queue_offset", "max_msg_nums", "commit_offset", "sys_flag"]
    assert [ext[k] for k in OPEN_FIELDS] == [str(getattr(h, a)) for a in open_attrs]
    every = {f.name for f in dataclasses.fields(H.PullMessageRequestHeader)}
    assert (
        set(api._PULL_KEY_FIELDS) == every - set(open_attrs) and len(every) == len(api._PULL_KEY_FIELDS) + 4
    )


@pytest.mark.parametrize("stype", list(SerializeType))
def test_the_async_client_and_a_template_write_the_same_pull(stype: SerializeType) -> None:
    api = MQClientAPI(None, serialize_type=stype, language="JAVA", version=453, stream=True)  # type: ignore[arg-type]
    t = PullTemplate(pull_request(api.settings, header(0, 1)))
    cmd = api._cmd(RequestCode.PULL_MESSAGE, header(77, 32).to_ext_fields())
    assert cmd.ext_fields["ReqT"] == "0" and cmd.serialize_type == stype
    assert t.frame(77, 32, 5) == encoded(cmd, 5)


def test_a_signed_pull_is_the_signed_request_of_the_async_client() -> None:
    signer = RequestSigner("ak", "sk")
    s = RequestSettings(stream=True)
    ours = PullTemplate(pull_request(s, header(0, 1))).command(9, 32)
    theirs = pull_request(s, header(9, 32))
    signer(ours)
    signer(theirs)
    assert ours.ext_fields["Signature"] == theirs.ext_fields["Signature"]
    assert encoded(ours, 3) == encoded(theirs, 3)


def test_a_pull_request_with_a_body_takes_no_template() -> None:
    cmd = pull_request(RequestSettings(), header(0, 1))
    cmd.body = b"x"
    with pytest.raises(ValueError, match="no body"):
        PullTemplate(cmd)
    cmd = pull_request(RequestSettings(), header(0, 1))
    del cmd.ext_fields["sysFlag"]
    with pytest.raises(ValueError, match="has the fields sysFlag"):
        PullTemplate(cmd)


def test_settings_write_a_code_too_wide_for_the_binary_header_as_json() -> None:
    s = RequestSettings(serialize_type=SerializeType.ROCKETMQ)
    assert s.request(RequestCode.PULL_MESSAGE).serialize_type == SerializeType.ROCKETMQ
    pop = s.request(RequestCode.POP_MESSAGE, {"a": "b"})
    assert pop.serialize_type == SerializeType.JSON and pop.ext_fields == {"a": "b"}
    ext = {"a": "b"}
    streamed = RequestSettings(stream=True).request(RequestCode.PULL_MESSAGE, ext, oneway=True)
    assert streamed.ext_fields == {"a": "b", "ReqT": "0"} and ext == {"a": "b"} and streamed.is_oneway


def _java_base(req: RemotingCommand) -> RemotingCommand:
    """A captured request with the offset and count a template's first request has."""
    base = decode_frame(req.encode())
    base.ext_fields["queueOffset"], base.ext_fields["maxMsgNums"] = "0", "1"
    base.opaque = 0
    return base


@pytest.mark.parametrize("file", CAPTURE_FILES)
def test_a_template_writes_the_java_clients_captured_pulls(file: str) -> None:
    pulls = [
        f
        for f in frames(file)
        if f.dir == "c2s" and f.kind == "request" and f.code == RequestCode.PULL_MESSAGE
    ]
    for f in pulls:
        req = decode_frame(f.raw)
        t = PullTemplate(_java_base(req))
        offset, count = int(req.ext_fields["queueOffset"]), int(req.ext_fields["maxMsgNums"])
        assert t.frame(offset, count, f.opaque) == f.raw, (file, f.seq)


def test_the_captures_hold_json_and_binary_pulls() -> None:
    kinds = {
        f.serialize for file in CAPTURE_FILES for f in frames(file) if f.kind == "request" and f.code == 11
    }
    assert kinds == {"JSON", "ROCKETMQ"}


# -- the answer -----------------------------------------------------------------------------------

EXT = {"suggestWhichBrokerId": "1", "nextBeginOffset": "33", "minOffset": "0", "maxOffset": "90"}


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.SUCCESS, PullStatus.FOUND),
        (ResponseCode.PULL_NOT_FOUND, PullStatus.NO_NEW_MSG),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG),
        (ResponseCode.PULL_OFFSET_MOVED, PullStatus.OFFSET_ILLEGAL),
    ],
)
def test_the_pull_statuses_are_javas(code: int, status: PullStatus) -> None:
    assert read_pull_answer(code, EXT, "OFFSET_OVERFLOW_ONE") == PullAnswer(status, 33, 0, 90, 1)


@given(st.integers(-(2**31), 2**31 - 1).filter(lambda c: c not in PULL_STATUS), st.none() | st.text())
def test_every_other_code_is_refused_with_its_remark(code: int, remark: str | None) -> None:
    assert read_pull_answer(code, EXT, remark) == PullRefused(code, remark)


def test_a_refused_answer_needs_no_header() -> None:
    got = read_pull_answer(ResponseCode.SUBSCRIPTION_NOT_LATEST, {}, "the consumer's subscription not latest")
    assert got == PullRefused(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")


@pytest.mark.parametrize("missing", sorted(EXT))
def test_a_pull_status_without_an_offset_is_a_protocol_error(missing: str) -> None:
    ext = {k: v for k, v in EXT.items() if k != missing}
    with pytest.raises(ProtocolError, match=missing):
        read_pull_answer(ResponseCode.SUCCESS, ext, None)


KEYS = ["suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset", "topicSysFlag", "groupSysFlag"]
# values around the fast path's edges: signs, spaces, underscores, non-ASCII digits, the limits of a
# long and an int
EDGES = [
    *["", " 5", "5 ", "1_0", "+7", "-0", "-3", "007", "\u0663", "\u00b2", "x"],
    *["9" * 18, "9" * 19, str(2**63 - 1), str(2**63), str(2**31 - 1), str(2**31), "9" * 9, "9" * 10],
]
BROKER_HEADER = {**EXT, "topicSysFlag": "0", "groupSysFlag": "0"}


def assert_read_as_the_codec_reads(ext: dict[str, str]) -> None:
    try:
        want = H.PullMessageResponseHeader.from_ext_fields(ext)
    except ProtocolError as exc:
        with pytest.raises(ProtocolError) as got:
            read_pull_answer(ResponseCode.SUCCESS, ext, None)
        assert str(got.value) == str(exc)
        return
    assert read_pull_answer(ResponseCode.SUCCESS, ext, None) == PullAnswer(
        PullStatus.FOUND,
        want.next_begin_offset,
        want.min_offset,
        want.max_offset,
        want.suggest_which_broker_id,
    )


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", [*EDGES, None])
def test_a_field_at_an_edge_is_read_as_the_generic_header_codec_reads_it(key: str, value: str | None) -> None:
    ext = dict(BROKER_HEADER)
    if value is None:
        del ext[key]
    else:
        ext[key] = value
    assert_read_as_the_codec_reads(ext)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {k: st.integers(0, 2**63 - 1).map(str) for k in KEYS[:4]},
        optional={k: st.integers(0, 2**31 - 1).map(str) for k in KEYS[4:]},
    ),
    st.sampled_from(KEYS),
    st.integers(-(2**64), 2**64).map(str) | st.text(alphabet="0123456789+- _", max_size=20),
)
def test_a_header_is_read_as_the_generic_header_codec_reads_it(
    ext: dict[str, str], key: str, value: str
) -> None:
    ext[key] = value
    assert_read_as_the_codec_reads(ext)


@pytest.mark.parametrize("file", CAPTURE_FILES)
def test_the_captured_pull_answers_classify_as_the_java_client_took_them(file: str) -> None:
    for req, resp in pairs(file):
        if req.code != RequestCode.PULL_MESSAGE or resp is None:
            continue
        cmd = decode_frame(resp.raw)
        got = read_pull_answer(cmd.code, cmd.ext_fields, cmd.remark)
        status = PULL_STATUS.get(resp.code)
        if status is None:  # 25 SUBSCRIPTION_NOT_LATEST, 1 SYSTEM_ERROR: the Java client's MQBrokerException
            assert got == PullRefused(resp.code, resp.header.get("remark")), (file, resp.seq)
            continue
        ext = resp.header["extFields"]
        assert got == PullAnswer(
            status,
            int(ext["nextBeginOffset"]),
            int(ext["minOffset"]),
            int(ext["maxOffset"]),
            int(ext["suggestWhichBrokerId"]),
        ), (file, resp.seq)


def test_the_captures_answer_pulls_with_every_status_and_refusals() -> None:
    codes = {
        resp.code
        for file in CAPTURE_FILES
        for req, resp in pairs(file)
        if req.code == RequestCode.PULL_MESSAGE and resp is not None
    }
    assert set(PULL_STATUS) <= codes and codes - set(PULL_STATUS)
