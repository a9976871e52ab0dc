"""What the broker must compute exactly as the Java broker does.

Strategy: tiny pure functions, no I/O. ``java_hash`` is ``String.hashCode`` over UTF-16 code units
(the tag code in consume queues and heartbeat ``codeSet``). Stored property strings are written by
``MessageDecoder.messageProperties2String`` iterating a ``java.util.HashMap``, so their order is the
HashMap's bucket order: we reproduce it (bucket index of the spread hash, insertion order within a
bucket) so a stored message is byte-identical to the real broker's. JSON bodies are written the way
fastjson writes beans (keys in alphabetical order, compact separators, raw UTF-8).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = [
    "NAME_VALUE_SEP",
    "PROP_SEP",
    "delay_level",
    "faq_suffix",
    "java_ext",
    "java_hash",
    "java_hash_order",
    "java_hashmap_capacity",
    "java_hashmap_order",
    "java_sized_capacity",
    "json_body",
    "mq_hash",
    "mq_hashmap_order",
    "mq_json",
    "object_key_map_json",
    "perm_to_string",
    "props_decode",
    "props_encode",
    "tags_code_of",
]

NAME_VALUE_SEP = "\x01"
PROP_SEP = "\x02"


def java_hash(text: str) -> int:
    """``String.hashCode()``: signed 32-bit, over UTF-16 code units."""
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        data = text.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def java_hashmap_capacity(max_size: int, initial: int = 16) -> int:
    """Table size of a ``new HashMap()`` that once held ``max_size`` entries (load factor 0.75)."""
    cap = initial
    while max_size > cap * 3 // 4:
        cap <<= 1
    return cap


def java_sized_capacity(initial: int, size: int) -> int:
    """Table size of a ``new HashMap(initial)`` (or HashSet) after ``size`` puts."""
    cap = 1
    while cap < initial:
        cap <<= 1
    while size > int(cap * 0.75):
        cap <<= 1
    return cap


def _bucket(h: int, mask: int) -> int:
    h &= 0xFFFFFFFF
    return (h ^ (h >> 16)) & mask


def java_hashmap_order(keys: Iterable[str], capacity: int | None = None) -> list[str]:
    """Iteration order of a HashMap whose keys were inserted in ``keys`` order."""
    ks = tuple(keys)
    return list(_order_of(ks, capacity or java_hashmap_capacity(len(ks))))


@functools.lru_cache(maxsize=4096)
def _order_of(keys: tuple[str, ...], capacity: int) -> tuple[str, ...]:
    mask = capacity - 1
    return tuple(k for _, _, k in sorted((_bucket(java_hash(k), mask), i, k) for i, k in enumerate(keys)))


def java_hash_order(items: Iterable[tuple[int, T]], capacity: int) -> list[T]:
    """Iteration order of a HashMap/HashSet of items with the given ``hashCode()`` values."""
    mask = capacity - 1
    decorated = [(_bucket(h, mask), i, item) for i, (h, item) in enumerate(items)]
    decorated.sort(key=lambda t: (t[0], t[1]))
    return [item for _, _, item in decorated]


def mq_hash(topic: str, broker_name: str, queue_id: int) -> int:
    """``MessageQueue.hashCode()``."""
    h = 31 + java_hash(broker_name)
    h = (31 * h + queue_id) & 0xFFFFFFFF
    h = (31 * h + java_hash(topic)) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@functools.lru_cache(maxsize=512)
def _cached_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(java_hashmap_order(keys))


def java_ext(fields: dict[str, str]) -> dict[str, str]:
    """Header fields in the order a Java ``HashMap`` extFields serializes them."""
    if len(fields) < 2:
        return fields
    return {k: fields[k] for k in _cached_order(tuple(fields))}


def props_decode(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``: ``k\\x01v\\x02...``, insertion-ordered."""
    out: dict[str, str] = {}
    n = len(text)
    index = 0
    while index < n:
        nxt = text.find(PROP_SEP, index)
        if nxt < 0:
            nxt = n
        if nxt - index >= 3:
            kv = text.find(NAME_VALUE_SEP, index)
            if index < kv < nxt - 1:
                out[text[index:kv]] = text[kv + 1 : nxt]  # a re-put keeps its place, as in a HashMap
        index = nxt + 1
    return out


def props_encode(props: Mapping[str, str], *, capacity: int | None = None, trailing: bool = False) -> str:
    """``messageProperties2String`` of a HashMap holding ``props`` (insertion order = dict order).

    ``trailing`` keeps the final separator (5.x does; 4.9.8 strips it).
    """
    if not props:
        return ""
    keys = tuple(props)
    order = _order_of(keys, capacity or java_hashmap_capacity(len(keys)))
    parts = [f"{k}{NAME_VALUE_SEP}{props[k]}" for k in order]
    text = PROP_SEP.join(parts)
    return text + PROP_SEP if trailing else text


def tags_code_of(props: Mapping[str, str]) -> int:
    """The consume-queue tag code: ``String.hashCode`` of TAGS, 0 without tags."""
    tags = props.get("TAGS")
    return java_hash(tags) if tags else 0


def delay_level(props: Mapping[str, str]) -> int:
    """``Message.getDelayTimeLevel``: DELAY as an integer, 0 when absent or not a number."""
    value = props.get("DELAY")
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        return 0


def faq_suffix(flavour: int) -> str:
    """``FAQUrl.suggestTodo(...)`` of the flavour's release."""
    url = (
        "https://rocketmq.apache.org/docs/bestPractice/06FAQ"
        if flavour == 5
        else "http://rocketmq.apache.org/docs/faq/"
    )
    return f"\nSee {url} for further details."


def perm_to_string(perm: int) -> str:
    """``PermName.perm2String``."""
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-")


def json_body(obj: Any) -> bytes:
    """Compact JSON as fastjson writes it (callers build dicts with keys in alphabetical order)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def mq_json(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    """A MessageQueue bean as fastjson writes it."""
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def mq_hashmap_order(entries: Iterable[tuple[dict[str, Any], T]]) -> list[tuple[dict[str, Any], T]]:
    """Entries keyed by MessageQueue beans (:func:`mq_json`) in the iteration order of a ``HashMap``
    that holds them (``ResetOffsetBody``, ``TopicStatsTable``, ``ConsumeStats``)."""
    items = list(entries)
    hashed = ((mq_hash(k["topic"], k["brokerName"], k["queueId"]), (k, v)) for k, v in items)
    return java_hash_order(hashed, java_hashmap_capacity(len(items)))


def object_key_map_json(entries: Iterable[tuple[dict[str, Any], Any]]) -> str:
    """A map keyed by beans, as fastjson writes it: ``{{"brokerName":..}:value,...}`` (not strict JSON)."""
    items = [
        json.dumps(k, ensure_ascii=False, separators=(",", ":"))
        + ":"
        + json.dumps(v, ensure_ascii=False, separators=(",", ":"))
        for k, v in entries
    ]
    return "{" + ",".join(items) + "}"
