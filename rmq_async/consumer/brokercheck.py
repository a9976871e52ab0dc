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
warning (its pulls will say more); a topic without a route yet is not checked (Java: no address).

One check Java does not make: a broker older than 5.1.3 (the version in its answer) has no
``CONTAINS``, ``STARTSWITH`` or ``ENDSWITH``, and its parser stops without an error where its grammar
ends, so it accepts ``a CONTAINS 'x'`` as the filter ``a``. When the 4.x grammar does not read the
whole expression, such a broker's SUCCESS is turned into :class:`SubscriptionRefused` (code 23).
"""

from __future__ import annotations

import logging

from ..errors import AuthError, BrokerError, RemotingError, RocketMQError, SubscriptionRefused
from ..protocol.bodies import SubscriptionData
from ..protocol.sql92 import FilterSyntaxError, parse
from .context import ConsumerContext

__all__ = ["check_in_brokers"]

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
    """CHECK_CLIENT_CONFIG of each SQL92 subscription in ``subs`` to every broker of its topic."""
    client = ctx.client
    for sub in subs:
        if sub.expression_type in ("", "TAG"):
            continue
        try:
            route = await client.route(sub.topic)
        except RocketMQError as exc:
            log.warning("SQL92 subscription of %r not checked: no route (%s)", sub.topic, exc)
            continue
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
