"""Consumer groups, producers and queue locks (``ConsumerManager``, ``RebalanceLockManager``).

Strategy: a consumer group maps each member's connection to its channel info (client id, language,
version, last heartbeat) and keeps one subscription per topic (the newest ``subVersion`` wins). A
membership change (join, unregister, connection closed, idle expiry) or a change of subscribed
topics calls ``notify(connections, group)``, which the broker turns into NOTIFY_CONSUMER_IDS_CHANGED
(40) oneways to every member; on a join this happens before the heartbeat is answered, as in Java.
Locks: one holder (client id) per (group, queue), renewed by a new lock from the same client, kept
after the client disconnects until it expires after ``broker_lock_expiry``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from .jcompat import java_hash, java_hash_order, java_sized_capacity, mq_hash, mq_json
from .server import Connection

__all__ = [
    "ClientChannel",
    "ConsumerGroup",
    "ConsumerManager",
    "LockManager",
    "ProducerManager",
    "Subscription",
    "build_subscription",
    "mq_keys",
    "mq_list_json",
]

MQKey = tuple[str, str, int]  # topic, broker name, queue id


class Subscription:
    """SubscriptionData: ``codes`` is None for ``*`` (every tag matches)."""

    __slots__ = ("codes", "expression_type", "sub_string", "topic", "version")

    def __init__(
        self,
        topic: str,
        sub_string: str,
        codes: frozenset[int] | None,
        version: int,
        expression_type: str = "TAG",
    ) -> None:
        self.topic = topic
        self.sub_string = sub_string
        self.codes = codes
        self.version = version
        self.expression_type = expression_type

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Subscription:
        etype = str(obj.get("expressionType") or "TAG")
        if etype != "TAG":  # SQL92: the expression as sent; the consume queue lets every tag through
            return cls(
                str(obj["topic"]),
                str(obj.get("subString") or ""),
                None,
                int(obj.get("subVersion") or 0),
                etype,
            )
        sub = str(obj.get("subString") or "*")
        codes = (
            None
            if sub == "*" or obj.get("classFilterMode")
            else frozenset(int(c) for c in obj.get("codeSet") or ())
        )
        return cls(str(obj["topic"]), sub, codes, int(obj.get("subVersion") or 0), etype)


def build_subscription(topic: str, sub_string: str | None, expression_type: str | None) -> Subscription:
    """``FilterAPI.build``: a TAG expression ``a || b`` becomes the hash codes of its tags; another
    type keeps its expression as sent and needs one (ValueError: ``Expression can't be null!``)."""
    etype = expression_type or "TAG"
    if etype != "TAG":
        if not sub_string:
            raise ValueError(f"Expression can't be null! {etype}")
        return Subscription(topic, sub_string, None, 0, etype)
    text = (sub_string or "").strip()
    if not text or text == "*":
        return Subscription(topic, "*", None, 0)
    tags = [t.strip() for t in text.split("||") if t.strip()]
    return Subscription(topic, text, frozenset(java_hash(t) for t in tags), 0)


class ClientChannel:
    __slots__ = ("client_id", "conn", "language", "last_update", "version")

    def __init__(self, conn: Connection, client_id: str, language: str, version: int) -> None:
        self.conn = conn
        self.client_id = client_id
        self.language = language
        self.version = version
        self.last_update = time.monotonic()


class ConsumerGroup:
    __slots__ = ("channels", "consume_from_where", "consume_type", "message_model", "name", "subs")

    def __init__(self, name: str, consume_type: str, message_model: str, consume_from_where: str) -> None:
        self.name = name
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.subs: dict[str, Subscription] = {}
        self.channels: dict[Connection, ClientChannel] = {}

    def client_ids(self) -> list[str]:
        return [ch.client_id for ch in self.channels.values()]

    def find(self, client_id: str) -> ClientChannel | None:
        for ch in self.channels.values():
            if ch.client_id == client_id:
                return ch
        return None


NotifyFn = Callable[[list[Connection], str], None]


class ConsumerManager:
    """Consumer groups by name."""

    def __init__(self, notify: NotifyFn) -> None:
        self.groups: dict[str, ConsumerGroup] = {}
        self._notify = notify

    def get(self, group: str) -> ConsumerGroup | None:
        return self.groups.get(group)

    def find_channel(self, group: str, client_id: str) -> ClientChannel | None:
        g = self.groups.get(group)
        return g.find(client_id) if g is not None else None

    def register(
        self,
        group: str,
        channel: ClientChannel,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subs: list[Subscription],
    ) -> bool:
        """``registerConsumer``: returns whether membership or subscribed topics changed."""
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = ConsumerGroup(group, consume_type, message_model, consume_from_where)
        g.consume_type, g.message_model, g.consume_from_where = (
            consume_type,
            message_model,
            consume_from_where,
        )
        changed = False
        old = g.channels.get(channel.conn)
        if old is None:
            g.channels[channel.conn] = channel
            changed = True
        elif old.client_id != channel.client_id:
            g.channels[channel.conn] = channel
        else:
            old.last_update = time.monotonic()
        new_topics = {s.topic for s in subs}
        for s in subs:
            cur = g.subs.get(s.topic)
            if cur is None:
                g.subs[s.topic] = s
                changed = True
            elif s.version > cur.version:
                g.subs[s.topic] = s
        for topic in [t for t in g.subs if t not in new_topics]:
            del g.subs[topic]
            changed = True
        if changed:
            self._notify(list(g.channels), group)
        return changed

    def unregister(self, group: str, conn: Connection) -> None:
        g = self.groups.get(group)
        if g is None:
            return
        g.channels.pop(conn, None)
        if not g.channels:
            del self.groups[group]
        self._notify(list(g.channels), group)

    def connection_closed(self, conn: Connection) -> None:
        for name, g in list(self.groups.items()):
            if g.channels.pop(conn, None) is not None:
                if not g.channels:
                    del self.groups[name]
                self._notify(list(g.channels), name)

    def scan_idle(self, timeout: float) -> list[Connection]:
        """Remove members without a heartbeat for ``timeout``; returns their connections (to close)."""
        now = time.monotonic()
        gone: list[Connection] = []
        for name, g in list(self.groups.items()):
            idle = [c for c, ch in g.channels.items() if now - ch.last_update > timeout]
            for c in idle:
                del g.channels[c]
                gone.append(c)
            if idle:
                if not g.channels:
                    del self.groups[name]
                self._notify(list(g.channels), name)
        return gone


class ProducerManager:
    """Producer groups by name (only kept to answer unregister and to drop closed channels)."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[Connection, ClientChannel]] = {}

    def register(self, group: str, channel: ClientChannel) -> None:
        chans = self.groups.setdefault(group, {})
        old = chans.get(channel.conn)
        if old is not None and old.client_id == channel.client_id:
            old.last_update = time.monotonic()
        else:
            chans[channel.conn] = channel

    def unregister(self, group: str, conn: Connection) -> None:
        chans = self.groups.get(group)
        if chans is not None:
            chans.pop(conn, None)
            if not chans:
                del self.groups[group]

    def connection_closed(self, conn: Connection) -> None:
        for group in list(self.groups):
            self.unregister(group, conn)

    def find_channel(self, client_id: str) -> ClientChannel | None:
        """``ProducerManager.findChannel``: a live channel of the producer client ``client_id``."""
        for chans in self.groups.values():
            for ch in chans.values():
                if ch.client_id == client_id and not ch.conn.closed:
                    return ch
        return None

    def scan_idle(self, timeout: float) -> list[Connection]:
        now = time.monotonic()
        gone = []
        for group, chans in list(self.groups.items()):
            for c, ch in list(chans.items()):
                if now - ch.last_update > timeout:
                    del chans[c]
                    gone.append(c)
            if not chans:
                del self.groups[group]
        return gone


class _LockEntry:
    __slots__ = ("client_id", "last_update")

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.last_update = time.monotonic()


class LockManager:
    """``RebalanceLockManager``: one holder per (group, queue)."""

    def __init__(self, expiry: float) -> None:
        self.expiry = expiry
        self.table: dict[str, dict[MQKey, _LockEntry]] = {}

    def _expired(self, e: _LockEntry, now: float) -> bool:
        return now - e.last_update > self.expiry

    def try_lock_batch(self, group: str, mqs: Iterable[MQKey], client_id: str) -> list[MQKey]:
        """The queues now locked by ``client_id`` (renewed or newly taken), in Java HashSet order."""
        now = time.monotonic()
        locked: list[MQKey] = []
        entries = self.table.setdefault(group, {})
        mq_list = list(dict.fromkeys(mqs))
        for mq in mq_list:
            e = entries.get(mq)
            if e is None:
                e = entries[mq] = _LockEntry(client_id)
            if e.client_id == client_id and not self._expired(e, now):
                e.last_update = now
                locked.append(mq)
            elif self._expired(e, now):
                e.client_id = client_id
                e.last_update = now
                locked.append(mq)
        cap = java_sized_capacity(len(mq_list), len(locked))
        return java_hash_order(((mq_hash(*mq), mq) for mq in locked), cap)

    def unlock_batch(self, group: str, mqs: Iterable[MQKey], client_id: str) -> None:
        entries = self.table.get(group)
        if entries is None:
            return
        for mq in mqs:
            e = entries.get(mq)
            if e is not None and e.client_id == client_id:
                del entries[mq]

    def holder(self, group: str, mq: MQKey) -> str | None:
        e = self.table.get(group, {}).get(mq)
        if e is None or self._expired(e, time.monotonic()):
            return None
        return e.client_id


def mq_keys(objs: Iterable[dict[str, Any]]) -> list[MQKey]:
    return [(str(o["topic"]), str(o["brokerName"]), int(o["queueId"])) for o in objs]


def mq_list_json(mqs: Iterable[MQKey]) -> list[dict[str, Any]]:
    return [mq_json(t, b, q) for t, b, q in mqs]
