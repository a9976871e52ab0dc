"""SQL92 filters of consumer groups (``ConsumerFilterManager``, ``ConsumerFilterData``,
``ExpressionMessageFilter``, ``ExpressionForRetryMessageFilter``).

Strategy. Every heartbeat registers its SQL92 subscriptions by (topic, group), as the broker's
``DefaultConsumerIdsChangeListener`` does on REGISTER, whether or not property filters are enabled:
a newer ``subVersion`` (``clientVersion``) replaces the filter data and recompiles it when the
expression changed; an expression that does not compile removes it (the pull then answers
FILTER_DATA_NOT_EXIST, 27); an older or equal version is ignored. A tag subscription registers
nothing, and the filter data of a topic the group no longer subscribes to is kept (Java marks it
dead, yet still finds it). The broker's bloom filter and consume-queue extension are optimisations
and are left out: every candidate message is evaluated on its stored properties (all of them, the
user's and the system ones such as TAGS, KEYS and UNIQ_KEY, as ``MessageDecoder.decodeProperties``
reads them), and only a TRUE result delivers it.

:func:`message_filter` is ``PullMessageProcessor``'s choice of filter: None (no commit-log check: a
tag subscription, the hot path) or a predicate over the stored properties string. With
``filterSupportRetry`` on, a 4.x broker evaluates a message of ``%RETRY%group`` with the group's
filter of the topic named by its RETRY_TOPIC property; a 5.x broker (``ExpressionForRetryMessageFilter``
after 5.0 returns early for tag subscriptions, and the retry topic is subscribed with ``*``) does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..protocol.sql92 import Expression, FilterSyntaxError, Flavour, parse
from .groups import Subscription
from .jcompat import props_decode
from .state import RETRY_PREFIX

__all__ = ["FilterData", "FilterManager", "compile_error", "is_tag_type", "message_filter"]

#: what ``SelectorParser.parse`` throws, as its ``getMessage()`` reads (``MQFilterException`` wraps it)
_PARSE_EXCEPTION = "org.apache.rocketmq.filter.parser.ParseException"


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``."""
    return expression_type is None or expression_type == "" or expression_type == "TAG"


def compile_error(expression: str, expression_type: str, flavour: Flavour) -> tuple[bool, str | None]:
    """``FilterFactory.INSTANCE.get(type).compile(expression)``: (True, None) when it compiles, else
    (False, the exception message the broker puts in its remark). An unknown type has no filter
    (Java: a NullPointerException, whose message is null)."""
    if expression_type != "SQL92":
        return False, None
    try:
        parse(expression, flavour=flavour)
    except FilterSyntaxError as exc:
        return False, f"{_PARSE_EXCEPTION}: {exc}"
    return True, None


@dataclass(slots=True)
class FilterData:
    """``ConsumerFilterData`` without the bloom filter data: ``compiled`` None when it did not compile."""

    topic: str
    group: str
    expression: str
    expression_type: str
    client_version: int
    compiled: Expression | None


def build(
    topic: str, group: str, expression: str, expression_type: str, client_version: int, flavour: Flavour
) -> FilterData | None:
    """``ConsumerFilterManager.build``: None for a tag type or an expression that does not compile."""
    if is_tag_type(expression_type) or expression_type != "SQL92":
        return None
    try:
        compiled = parse(expression, flavour=flavour)
    except FilterSyntaxError:
        return None
    return FilterData(topic, group, expression, expression_type, client_version, compiled)


class FilterManager:
    """``ConsumerFilterManager``: filter data by topic, then group."""

    def __init__(self, flavour: Flavour) -> None:
        self.flavour: Flavour = flavour
        self.by_topic: dict[str, dict[str, FilterData]] = {}

    def build(self, topic: str, group: str, expression: str, etype: str, version: int) -> FilterData | None:
        return build(topic, group, expression, etype, version, self.flavour)

    def register(self, group: str, subs: Iterable[Subscription]) -> None:
        """A heartbeat's subscriptions of ``group`` (``register(group, subList)``)."""
        for s in subs:
            self._register(s.topic, group, s.sub_string, s.expression_type, s.version)

    def _register(self, topic: str, group: str, expression: str, etype: str, version: int) -> None:
        if is_tag_type(etype) or not expression:
            return
        groups = self.by_topic.setdefault(topic, {})
        old = groups.get(group)
        if old is not None:
            if version <= old.client_version:
                return
            if old.expression == expression and old.expression_type == etype:
                old.client_version = version
                return
        new = self.build(topic, group, expression, etype, version)
        if new is None:
            if old is not None:  # a new expression that does not compile: the old one goes
                del groups[group]
            return
        groups[group] = new

    def get(self, topic: str | None, group: str) -> FilterData | None:
        if topic is None:
            return None
        groups = self.by_topic.get(topic)
        return groups.get(group) if groups else None


def _evaluator(data: FilterData | None) -> Callable[[str], bool] | None:
    if data is None or data.compiled is None:
        return None  # no expression: every message matches
    matches = data.compiled.matches
    return lambda props: matches(props_decode(props))


def message_filter(
    sub: Subscription,
    data: FilterData | None,
    filters: FilterManager,
    group: str,
    *,
    support_retry: bool,
    flavour: Flavour,
) -> Callable[[str], bool] | None:
    """The commit-log check of one pull: None when every message the consume queue lets through is
    delivered (tag subscriptions; the pull's hot path), else a predicate over a stored message's
    properties string (``ExpressionMessageFilter`` / ``ExpressionForRetryMessageFilter``)."""
    tag = is_tag_type(sub.expression_type)
    if not support_retry or flavour == 5 or not sub.topic.startswith(RETRY_PREFIX):
        return None if tag else _evaluator(data)
    # 4.x ExpressionForRetryMessageFilter on a retry topic: the filter of the original topic
    retry_group = sub.topic[len(RETRY_PREFIX) :]

    def retry_accept(props: str) -> bool:
        p = props_decode(props)
        real = filters.get(p.get("RETRY_TOPIC"), retry_group)
        if real is None or real.compiled is None:
            return True
        return real.compiled.matches(p)

    return retry_accept
