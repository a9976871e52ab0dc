"""Warn when members of one group subscribe differently.

The broker keeps ONE subscription per group and topic (the last one a heartbeat registered) and
filters every member's pulls by it, so members that subscribe differently steal each other's
messages or lose them. When a member appears in the group's consumer list, we ask it (through the
broker, GET_CONSUMER_RUNNING_INFO, which Java members answer too) for its subscriptions once, and
log a clear warning for every topic whose expression differs from ours. A SQL92 subscription is
compared with its type (``SQL92 'a > 5'``), so a tag and a SQL92 one of the same text differ.
"""

from __future__ import annotations

import logging

import anyio

from ..errors import ProtocolError, RocketMQError
from ..protocol.filter import Selector
from .context import ConsumerContext

__all__ = ["SubscriptionChecker", "differences"]

log = logging.getLogger("rmq_async.consumer")


def differences(ours: dict[str, str], theirs: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """Topics whose expressions differ: topic -> (ours, theirs); None where one side lacks the topic."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for topic in sorted(set(ours) | set(theirs)):
        a, b = ours.get(topic), theirs.get(topic)
        if a != b:
            out[topic] = (a, b)
    return out


class SubscriptionChecker:
    def __init__(self, ctx: ConsumerContext) -> None:
        self.c = ctx
        self.checked: set[str] = set()
        #: client id -> differing topics, for tests and health reports
        self.mismatches: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        #: set once the first member that subscribes differently is found
        self.mismatched = anyio.Event()

    def new_members(self, cids: list[str]) -> list[str]:
        own = self.c.client.client_id
        return [cid for cid in cids if cid != own and cid not in self.checked]

    async def check(self, broker_addr: str, cids: list[str]) -> None:
        c = self.c
        ours = {t: str(sel) for t, sel in c.subscriptions.selectors().items()}
        for cid in self.new_members(cids):
            self.checked.add(cid)
            try:
                info = await c.client.api.get_consumer_running_info(
                    broker_addr, c.group, cid, c.timing.request_timeout * 2
                )
            except (RocketMQError, ProtocolError) as exc:
                log.debug("running info of %s unavailable: %s", cid, exc)
                continue
            theirs = {
                s.topic: str(Selector("SQL92" if s.expression_type == "SQL92" else "TAG", s.sub_string))
                for s in info.subscription_set
                if not s.topic.startswith("%RETRY%")
            }
            diff = differences(ours, theirs)
            if diff:
                self.mismatches[cid] = diff
                self.mismatched.set()
                for topic, (a, b) in diff.items():
                    log.warning(
                        "group %s: member %s subscribes %s with %r but this member (%s) with %r; the broker "
                        "filters every member by the group's last registered subscription, so members "
                        "of a group must subscribe alike",
                        c.group,
                        cid,
                        topic,
                        b,
                        c.client.client_id,
                        a,
                    )
