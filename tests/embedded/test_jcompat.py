"""Java-compatible helpers: String.hashCode, HashMap iteration order, fastjson-ish bodies."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmq_async.embedded.jcompat import (
    java_ext,
    java_hash,
    java_hashmap_capacity,
    mq_hash,
    object_key_map_json,
    perm_to_string,
    props_decode,
    props_encode,
)


def test_tag_hash_codes_from_the_captures() -> None:
    assert java_hash("TagA") == 2598919
    assert java_hash("TagC") == 2598921
    assert java_hash("TagX") == 2598942
    assert java_hash("TagZip") == -1797378745
    assert java_hash("TagKeys") == 115383438
    assert java_hash("标签中文") == 824391569
    assert java_hash("") == 0
    assert java_hash("😀") == (0xD83D * 31 + 0xDE00) - (0 if (0xD83D * 31 + 0xDE00) < 2**31 else 2**32)


@given(st.text(max_size=40))
def test_java_hash_is_a_signed_int32(s: str) -> None:
    h = java_hash(s)
    assert -(2**31) <= h < 2**31


def test_stored_properties_order_4_9_8() -> None:
    """send.jsonl: sent KEYS, UNIQ_KEY, WAIT, TAGS; stored KEYS, UNIQ_KEY, CLUSTER, TAGS."""
    props = props_decode("KEYS\x01k-hb\x02UNIQ_KEY\x01FD01\x02WAIT\x01true\x02TAGS\x01TagHB")
    props["CLUSTER"] = "DefaultCluster"
    cap = java_hashmap_capacity(len(props))
    del props["WAIT"]
    assert props_encode(props, capacity=cap) == (
        "KEYS\x01k-hb\x02UNIQ_KEY\x01FD01\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagHB"
    )


def test_stored_properties_order_5_3_3() -> None:
    """v5 captures: HashMap(128), MSG_REGION/TRACE_ON added, trailing separator."""
    props = props_decode("KEYS\x01k-0\x02UNIQ_KEY\x01FD\x02WAIT\x01true\x02TAGS\x01TagA\x02")
    props.update(MSG_REGION="DefaultRegion", TRACE_ON="true")
    again = props_decode(props_encode(props, capacity=128, trailing=True))
    again["CLUSTER"] = "DefaultCluster"
    assert props_encode(again, capacity=128, trailing=True) == (
        "MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01FD\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA\x02"
        "KEYS\x01k-0\x02WAIT\x01true\x02TRACE_ON\x01true\x02"
    )


def test_props_decode_like_java() -> None:
    assert props_decode("") == {}
    assert props_decode("a\x01b") == {"a": "b"}
    assert props_decode("k\x01\x02x\x01yz\x02") == {"x": "yz"}  # an empty value is skipped, as in Java
    assert props_decode("A\x011\x02B\x012\x02A\x013") == {"A": "3", "B": "2"}


def test_ext_field_order_as_captured() -> None:
    ext = {"msgId": "1", "queueId": "2", "queueOffset": "3", "MSG_REGION": "R", "TRACE_ON": "true"}
    assert list(java_ext(ext)) == ["queueId", "TRACE_ON", "MSG_REGION", "msgId", "queueOffset"]
    pull = {"suggestWhichBrokerId": "0", "nextBeginOffset": "1", "minOffset": "0", "maxOffset": "1"}
    assert list(java_ext(pull)) == ["suggestWhichBrokerId", "nextBeginOffset", "maxOffset", "minOffset"]


def test_misc() -> None:
    assert perm_to_string(6) == "RW-" and perm_to_string(7) == "RWX" and perm_to_string(1) == "--X"
    assert isinstance(mq_hash("T", "broker-a", 0), int)
    assert object_key_map_json([({"brokerName": "b", "queueId": 0, "topic": "T"}, 5)]) == (
        '{{"brokerName":"b","queueId":0,"topic":"T"}:5}'
    )
