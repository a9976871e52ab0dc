"""Asking the brokers whether they can serve a consumer's SQL92 subscriptions before it starts
(Java ``MQClientInstance.checkClientInBroker``, CHECK_CLIENT_CONFIG 46).

A broker answers SUCCESS for a tag subscription; for a SQL92 one it answers code 1 when property
filters are off (``enablePropertyFilter=false``, the default of 4.x and 5.x brokers) and code 23
(SUBSCRIPTION_PARSE_FAILED) when it cannot compile the expression (a 4.x broker and ``CONTAINS``, for
instance). Either refusal fails ``start()`` (or a lite consumer's ``subscribe()``) with
:class:`~rmq_async.errors.SubscriptionRefused`, as Java's ``start()`` fails with an
``MQClientException``. Java asks one broker of the topic's route and assumes the others are set up
alike; here every broker of the route is asked (a cluster whose brokers disagree fails at once, not
at the first pull of the odd broker's queues). A broker that cannot be reached is passed over with a
warning (its pulls will say more). A topic without a route yet cannot be checked (Java: no address, and
never again): it is checked when its route appears (:func:`check_routed`, from the rebalance), and a
refusal then, while running, is logged at ERROR and kept in ``ctx.sql_checks`` for ``health()`` (not
ready), as are pulls the broker refuses because it cannot filter by the subscription's type
(:func:`note_refused_pull`: a broker whose property filters were turned off later, say).

One check Java does not make: a broker older than 5.1.3 (the version in its answer) has no
``CONTAINS``, ``STARTSWITH`` or ``ENDSWITH``, and its parser stops without an error where its grammar
ends, so it accepts ``a CONTAINS 'x'`` as the filter ``a``. When the 4.x grammar does not read the
whole expression, such a broker's SUCCESS is turned into :class:`SubscriptionRefused` (code 23).
"""

from __future__ import annotations

import logging

from ..errors import AuthError, BrokerError, RemotingError, RocketMQError, SubscriptionRefused
from ..protocol.bodies import SubscriptionData
from ..protocol.codes import ResponseCode
from ..protocol.mq import MessageQueue
from ..protocol.sql92 import FilterSyntaxError, parse
from .context import ConsumerContext

__all__ = ["check_in_brokers", "check_routed", "check_while_running", "note_refused_pull"]

log = logging.getLogger("rmq_async.consumer")

#: ``MQVersion.Version.V5_1_3.ordinal()``: the first broker whose SQL92 grammar has CONTAINS & co.
MQ_VERSION_V5_1_3 = 439


def _old_grammar_problem(expression: str) -> str | None:
    """Why a pre-5.1.3 broker would not read ``expression`` as written (None: it would)."""
    try:
        parse(expression, flavour=4, strict=True)
    except FilterSyntaxError as exc:
        return (
            f"(checked by the client) a broker before 5.1.3 does not read this expression as written: {exc}"
        )
    return None


async def check_in_brokers(ctx: ConsumerContext, subs: list[SubscriptionData]) -> None:
    """CHECK_CLIENT_CONFIG of each SQL92 subscription in ``subs`` to every broker of its topic; a topic
    without a route is left to :func:`check_routed`."""
    client = ctx.client
    checks = ctx.sql_checks
    for sub in subs:
        if sub.expression_type in ("", "TAG"):
            checks.unchecked.discard(sub.topic)
            checks.refused.pop(sub.topic, None)
            continue
        try:
            route = await client.route(sub.topic)
        except RocketMQError as exc:
            checks.unchecked.add(sub.topic)
            log.warning(
                "SQL92 subscription of %r not checked yet: no route (%s); checked once it has one",
                sub.topic,
                exc,
            )
            continue
        checks.unchecked.discard(sub.topic)
        for name in sorted({bd.broker_name for bd in route.broker_datas}):
            addr = client.broker_addr(name)
            if addr is None:
                continue
            try:
                resp = await client.api.check_client_config(
                    addr, ctx.group, client.client_id, sub, ctx.timing.request_timeout
                )
                if sub.expression_type == "SQL92" and resp.version < MQ_VERSION_V5_1_3:
                    problem = _old_grammar_problem(sub.sub_string)
                    if problem is not None:
                        raise BrokerError(23, problem)
            except AuthError:
                raise
            except BrokerError as exc:
                raise SubscriptionRefused(
                    exc.code,
                    exc.remark,
                    topic=sub.topic,
                    expression=sub.sub_string,
                    expression_type=sub.expression_type,
                    group=ctx.group,
                    addr=addr,
                ) from None
            except RemotingError as exc:
                log.warning(
                    "SQL92 subscription of %r not checked with broker %s (%s): %s", sub.topic, name, addr, exc
                )
        checks.refused.pop(sub.topic, None)


def _refused(ctx: ConsumerContext, exc: SubscriptionRefused) -> None:
    """A refusal found while running: loud (ERROR) once per topic, and kept for ``health()``."""
    checks = ctx.sql_checks
    if checks.refused.get(exc.topic) != str(exc):
        log.error("consumer %s: %s; its pulls are refused until that is fixed", ctx.group, exc)
    checks.refused[exc.topic] = str(exc)


async def check_routed(ctx: ConsumerContext, topic: str) -> None:
    """``topic`` has a route now: if its SQL92 subscription waits for a check, check it (a refusal is
    logged at ERROR and shown by ``health()``)."""
    if topic not in ctx.sql_checks.unchecked or topic not in ctx.client.routes:
        return  # (checked, or still no route: the route refresh looks it up)
    sub = ctx.subscriptions.get(topic)
    if sub is not None:
        await check_while_running(ctx, [sub])


async def check_while_running(ctx: ConsumerContext, subs: list[SubscriptionData]) -> None:
    """:func:`check_in_brokers` of a running consumer: a refusal does not raise (nothing to fail) but
    is logged at ERROR and shown by ``health()``."""
    try:
        await check_in_brokers(ctx, subs)
    except SubscriptionRefused as exc:
        _refused(ctx, exc)
    except RocketMQError as exc:
        log.error("consumer %s: SQL92 subscriptions not checked: %s", ctx.group, exc)


def note_refused_pull(ctx: ConsumerContext, mq: MessageQueue, exc: RocketMQError) -> bool:
    """Whether a failed pull of ``mq`` was refused because the broker cannot filter by the
    subscription's type (SYSTEM_ERROR "does not support consumer to filter message by ..."): then it is
    counted and the refusal kept for ``health()`` (logged at ERROR once)."""
    if not (
        isinstance(exc, BrokerError)
        and exc.code == ResponseCode.SYSTEM_ERROR
        and "filter message by" in (exc.remark or "")
    ):
        return False
    sub = ctx.subscriptions.get(mq.topic)
    checks = ctx.sql_checks
    checks.pulls_refused[mq.topic] = checks.pulls_refused.get(mq.topic, 0) + 1
    if mq.topic not in checks.refused:
        _refused(
            ctx,
            SubscriptionRefused(
                exc.code,
                exc.remark,
                topic=mq.topic,
                expression=sub.sub_string if sub is not None else "?",
                expression_type=sub.expression_type if sub is not None else "?",
                group=ctx.group,
                addr=exc.addr,
            ),
        )
    return True
