"""``rmq-async``: embedded | produce | consume | bench (also ``python -m rmq_async``).

Each command prints one JSON line at the end (stdout) and exits non-zero with a clear message (stderr)
when the cluster is unreachable. The event loop is uvloop when installed (``--no-uvloop`` turns it off).
A bad value on the command line is one line ``rmq-async: ...`` and exit 2, never a traceback
(:mod:`rmq_async.cli.args`).
SIGTERM and SIGINT stop ``consume`` gracefully (:class:`_StopSignals`): summary printed, exit 0, or
128 + the signal when running handlers outlived ``shutdown_timeout``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from itertools import chain, islice, repeat
from operator import le
from typing import Any

import anyio

from .. import __version__
from ..errors import AuthError, ConfigError, RocketMQError, TopicNotExist
from ..internals import internals
from .args import Parser, UsageError, byte_size, count, epoch_ms, namesrv_addr, positive, seconds
from .auth import add_credential_arguments, credentials_from_args
from .progress import ProgressLine
from .tls import add_tls_arguments, export_tls_env, tls_options

__all__ = ["main"]


def _run(coro_fn: Callable[[], Coroutine[Any, Any, int]], use_uvloop: bool) -> int:
    if use_uvloop:
        try:
            import uvloop

            return int(uvloop.run(coro_fn()))
        except ImportError:
            pass
    return asyncio.run(coro_fn())


def _namesrv(args: argparse.Namespace) -> str:
    if args.namesrv:
        return str(args.namesrv)
    addr = os.environ.get("NAMESRV_ADDR")
    if not addr:
        raise UsageError("no name server: pass --namesrv HOST:PORT or set NAMESRV_ADDR")
    try:
        return namesrv_addr(addr)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"NAMESRV_ADDR: {exc}") from None


class _StopSignals:
    """SIGTERM and SIGINT as a graceful stop (Docker and Kubernetes stop a container with SIGTERM).

    The first signal sets :attr:`event` (the command stops consuming, lets its handlers finish within
    ``shutdown_timeout``, commits and prints its summary) and puts the default disposition back, so a
    second signal ends the process at once. :attr:`signum` is the first signal, for the exit status
    ``128 + signum`` of a shutdown that had to give up.
    """

    _SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.signum: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> _StopSignals:
        loop = asyncio.get_running_loop()
        try:
            for sig in self._SIGNALS:
                loop.add_signal_handler(sig, self._received, sig)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals (Windows)
            return self
        self._loop = loop
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            for sig in self._SIGNALS:
                loop.remove_signal_handler(sig)

    def _received(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
            log.warning("%s: stopping (again to stop at once)", signal.Signals(signum).name)
        self._restore()  # SIGINT -> KeyboardInterrupt (exit 130), SIGTERM -> killed by the signal
        self.event.set()

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name


def _fail(msg: str) -> int:
    print(f"rmq-async: {msg}", file=sys.stderr, flush=True)
    return 2


def _refused(exc: AuthError) -> int:
    """The broker answered, refusing our keys (a wrong secret, an unknown access key, a permission):
    not an unreachable cluster. The refusal names the access key and the code, never the secret."""
    return _fail(f"the broker refused the credentials: {exc}")


def _property_arg(text: str) -> tuple[str, str]:
    """``--property KEY=VALUE``: a user property of every message sent."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key, value


def _selector(args: argparse.Namespace) -> Any:
    """``--sql`` (a SQL92 property filter; the broker must enable it) or ``--expr`` (tags)."""
    from ..protocol.filter import Selector

    if args.sql is None:
        return Selector.tag(args.expr)
    if args.expr != "*":
        raise ConfigError("--sql and --expr (a tag expression) cannot be combined")
    return Selector.sql(args.sql)


# -- produce --------------------------------------------------------------------------------------------


async def _produce(args: argparse.Namespace) -> int:
    from ..config import ClientConfig, ProducerConfig
    from ..producer.producer import Producer
    from ..protocol.message import Message

    n = args.count
    pad = b"x" * args.size
    props = dict(args.property or ())  # --property KEY=VALUE: on every message

    def make(i: int) -> Message:
        key = f"{args.keys_prefix}{i}"
        body = (key.encode() + b":" + pad)[: args.size] if args.size > 0 else b""
        return Message(args.topic, body or b"-", tags=args.tags, keys=key, properties=dict(props))

    try:
        make(0)  # the topic, tags and keys as a message: Java's Validators.checkMessage, before sending
        cfg = ProducerConfig(group=args.group, default_topic_queue_nums=args.queues)
    except ValueError as exc:
        return _fail(f"bad message settings: {exc}")
    producer = Producer(
        config=cfg,
        client_config=ClientConfig(
            namesrv_addr=_namesrv(args),
            credentials=credentials_from_args(args),
            trace=args.trace,
            **tls_options(args),
        ),
    )
    try:
        await producer.start()
        await producer.queues(args.topic)  # fail fast when the cluster is unreachable
    except TopicNotExist as exc:
        await producer.stop()
        return _fail(f"topic {args.topic!r} does not exist: {exc}")
    except AuthError as exc:
        await producer.stop()
        return _refused(exc)
    except RocketMQError as exc:
        await producer.stop()
        return _fail(f"cannot reach the cluster: {exc}")

    sent = failed = 0
    progress = ProgressLine(n, "produce", enabled=sys.stderr.isatty() and not args.quiet)
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        nonlocal sent, failed
        try:
            if args.order_key_mod:
                from ..producer.producer import select_by_key_hash

                await producer.send(make(i), selector=select_by_key_hash, arg=i % args.order_key_mod)
            else:
                await producer.send(make(i))
            sent += 1
        except RocketMQError as exc:
            failed += 1
            logging.getLogger("rmq_async.cli").warning("send %d failed: %s", i, exc)
        progress.advance(1)

    async def batch(i0: int, i1: int) -> None:
        nonlocal sent, failed
        try:
            await producer.send_batch([make(i) for i in range(i0, i1)])
            sent += i1 - i0
        except RocketMQError as exc:
            failed += i1 - i0
            logging.getLogger("rmq_async.cli").warning("batch %d..%d failed: %s", i0, i1, exc)
        progress.advance(i1 - i0)

    try:
        if args.order_key_mod:
            # one sequential sender per key class keeps each key's messages in send order
            async with anyio.create_task_group() as tg:
                for k in range(args.order_key_mod):

                    async def lane(k: int = k) -> None:
                        for i in range(k, n, args.order_key_mod):
                            await one(i)

                    tg.start_soon(lane)
        else:
            step = max(1, args.batch)
            chunks = [(i, min(n, i + step)) for i in range(0, n, step)]
            it = iter(chunks)
            async with anyio.create_task_group() as tg:
                for _ in range(min(args.concurrency, len(chunks))):

                    async def worker() -> None:
                        for i0, i1 in it:
                            if step == 1:
                                await one(i0)
                            else:
                                await batch(i0, i1)

                    tg.start_soon(worker)
        secs = time.perf_counter() - t0  # the sends only: not the unregister at shutdown
    finally:
        progress.close()
        await producer.stop()
    print(
        json.dumps(
            {
                "sent": sent,
                "failed": failed,
                "seconds": round(secs, 3),
                "msgs_per_s": round(sent / secs, 1) if secs > 0 else 0.0,
            }
        ),
        flush=True,
    )
    return 0 if failed == 0 else 1


# -- consume --------------------------------------------------------------------------------------------

_DIGITS = "0123456789"
#: ``consume``'s default messages per handler call (``--batch``)
_CONSUME_BATCH = 32
#: how long ``consume --fail-every`` waits for the retries of the messages it failed (a real broker's
#: delay level 3 is 10 s; its send-back fallbacks add a local retry after 5 s)
_RETRY_WAIT = 60.0

log = logging.getLogger("rmq_async.cli")


async def _consume(args: argparse.Namespace) -> int:
    with _StopSignals() as stop:
        return await _consume_until(args, stop)


async def _consume_until(args: argparse.Namespace, stop: _StopSignals) -> int:
    from ..config import ClientConfig, ConsumeFrom
    from ..consumer.push import PushConsumer
    from ..consumer.types import ConsumeContext, ConsumeResult
    from ..protocol.mq import MessageQueue
    from ..protocol.stored import MessageExt

    starts: dict[str, ConsumeFrom] = {
        "first": "CONSUME_FROM_FIRST_OFFSET",
        "last": "CONSUME_FROM_LAST_OFFSET",
        "timestamp": "CONSUME_FROM_TIMESTAMP",
    }
    where = starts[args.from_]
    if args.timestamp is not None and args.from_ != "timestamp":
        raise UsageError("--timestamp is for --from timestamp")
    seen: set[str] = set()  # keys (else msg ids) consumed: unique_keys; consumed - unique = duplicates
    # order check: per queue (broker, topic, queue id), the send index (a key's trailing integer) must
    # not go down from one first delivery to the next. Retries and redeliveries are at-least-once
    # repeats, not disorder: the queues of the group's retry topic are not checked, and a message at
    # an offset of its queue at or below one already checked (a local retry, a batch consumed again
    # after a rebalance or a lost lock) is not either; POP (whose retries come in the topic's own
    # queues) skips messages with reconsume times > 0. Per queue: [last offset checked, its index].
    # Per queue: [last offset checked, its index, 1 if that message was produced before the run].
    order_state: dict[MessageQueue, list[int] | None] = {}
    # Messages produced before this run started (an earlier producer run may have sent the same keys):
    # their keys, so the summary can tell repeats of them from redeliveries (found per batch from its
    # first and last born timestamps: nothing per message once the consumer is past them)
    started_ms = int(time.time() * 1000)
    old_keys: set[str] = set()
    # ... gathered a batch at a time (a list per batch, no insert a key) and folded into old_keys only
    # when a lookup needs them: the whole-batch step below knows a new key's age from its message
    old_batches: list[list[str]] = []
    older = older_repeats = older_order_violations = 0
    cur_mq: MessageQueue | None = None  # the last batch's queue and its state (the next is mostly it)
    cur_state: list[int] | None = None
    pop = args.pop
    order_violations = 0
    first_seen: set[str] = set()
    # keys failed on purpose (--fail-every) and not seen since: their retries are on their way (a real
    # broker sends them back after delay level 3 + reconsume times, 10 s at first), so the idle exit
    # waits for them. Broadcasting drops failed messages (as Java): nothing comes back to wait for.
    awaited_retries: set[str] = set()
    consumed = 0
    first_delivery = 0
    t_first: float | None = None
    t_last = time.perf_counter()
    done = anyio.Event()
    wake = anyio.Event()  # set with done, and when the last awaited retry came (rare: no cost per message)

    # the per-message work below is kept small: `consume --count N` measures the client, not itself,
    # so it is meant to run near the no-op handler's rate of `rmq-async bench push` (both are compared
    # in benchmarks/RESULTS.md)
    fail_every = args.fail_every
    printing = args.print or args.print_body
    seen_add = seen.add
    count = args.count

    # a plain function (it awaits nothing): the pulling task calls it without a hand-off to a worker
    def handler(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        nonlocal consumed, first_delivery, t_first, t_last, order_violations, cur_mq, cur_state
        nonlocal older, older_repeats, older_order_violations
        if fail_every:
            for m in msgs:
                key = m.keys or m.msg_id
                if key not in first_seen:
                    first_seen.add(key)
                    first_delivery += 1
                    if first_delivery % fail_every == 0:
                        if not args.broadcast:
                            awaited_retries.update(m.keys or m.msg_id for m in msgs)
                        return ConsumeResult.RECONSUME_LATER
        now = time.perf_counter()
        if t_first is None:
            t_first = now
        t_last = now
        consumed += len(msgs)
        mq = ctx.mq  # every message of a batch comes from this queue
        if mq is not cur_mq:
            if mq in order_state:
                cur_state = order_state[mq]
            else:
                cur_state = order_state[mq] = None if mq.topic.startswith("%RETRY%") else [-1, -1, 0]
            cur_mq = mq
        state = cur_state
        keys = [m.keys or m.msg_id for m in msgs]  # each message's key, read once
        if msgs[0].born_timestamp < started_ms:  # (stored in order: the batch's first is its oldest)
            if msgs[-1].born_timestamp < started_ms:
                older += len(keys)
                old_batches.append(keys)
            else:
                old = [k for m, k in zip(msgs, keys, strict=True) if m.born_timestamp < started_ms]
                older += len(old)
                old_batches.append(old)
        have_old = bool(old_keys) or bool(old_batches)
        # the queue's order state in locals for the batch (every message of it is of this queue)
        last_offset, last_index, last_old = state if state is not None else (0, 0, 0)
        fast = False
        if not (awaited_retries or printing or pop) and seen.isdisjoint(keys):
            # the common batch in whole-batch steps: every key new to the run (none twice in the
            # batch: seen grows by all of them, else they are taken out again) and, on an
            # order-checked queue, past the last offset checked with its send indexes not going
            # down; anything else takes the message-by-message loop below
            before = len(seen)
            seen.update(keys)
            if len(seen) - before == len(keys):
                if state is None:
                    fast = True
                elif msgs[0].queue_offset > last_offset:  # (a batch's offsets ascend)
                    # every key one prefix + a trailing integer (`produce`'s "k-<i>"), in C-level
                    # passes: the same rstrip of each key, none all prefix; then, all of one length,
                    # their text order is their integers' order (else the integers are compared)
                    k0 = keys[0]
                    pre = k0.rstrip(_DIGITS)
                    p = len(pre)
                    if len(set(map(str.rstrip, keys, repeat(_DIGITS)))) == 1 and pre not in keys:
                        if len(set(map(len, keys))) == 1:
                            rising = all(map(le, keys, islice(keys, 1, None)))
                        else:
                            indexes = list(map(int, map(str.removeprefix, keys, repeat(pre))))
                            rising = all(map(le, indexes, islice(indexes, 1, None)))
                        if rising and last_index <= int(k0[p:]):
                            fast = True
                            last_offset, last_index = msgs[-1].queue_offset, int(keys[-1][p:])
                            # (a key new to the run is an old one's exactly when its message is)
                            last_old = msgs[-1].born_timestamp < started_ms
            if not fast:
                seen.difference_update(keys)  # (all were new: seen is as before the batch)
        if not fast and old_batches:
            old_keys.update(chain.from_iterable(old_batches))  # the message loop looks them up
            old_batches.clear()
        for m, key in () if fast else zip(msgs, keys, strict=True):
            if awaited_retries:
                awaited_retries.discard(key)
                if not awaited_retries:
                    wake.set()
            if have_old and key in old_keys:
                was_old = True
                before = len(seen)
                seen_add(key)
                if len(seen) == before:  # seen already: a repeat of a message sent before the run
                    older_repeats += 1
            else:
                was_old = False
                seen_add(key)
            if state is not None:
                offset = m.queue_offset
                if offset > last_offset and (not pop or m.reconsume_times == 0):
                    digits = key[len(key.rstrip(_DIGITS)) :]  # the trailing integer: the send index
                    if digits:
                        index = int(digits)
                        if index < last_index:
                            order_violations += 1
                            if was_old or last_old:
                                older_order_violations += 1
                        last_offset, last_index, last_old = offset, index, was_old
            if printing:
                line: dict[str, Any] = {
                    "topic": m.topic,
                    "queue_id": m.queue_id,
                    "offset": m.queue_offset,
                    "key": key,
                    "msg_id": m.msg_id,
                    "tags": m.tags,
                    "reconsume_times": m.reconsume_times,
                }
                if args.print_body:
                    line["body"] = m.body.decode("utf-8", errors="replace")
                print(json.dumps(line), flush=True)
        if state is not None:
            state[0], state[1], state[2] = last_offset, last_index, last_old
        if show_progress:
            progress.advance(len(msgs))
        if count and len(seen) >= count:
            done.set()
            wake.set()
        return ConsumeResult.SUCCESS

    # the bookkeeping above costs least per message over batches (one handler call for up to 32): the
    # CLI's handler never fails a message unless --fail-every asks, so the batch is invisible otherwise
    batch = args.batch if args.batch is not None else (1 if fail_every else _CONSUME_BATCH)
    try:
        consumer = PushConsumer(
            args.group,
            handler=handler,
            subscriptions={args.topic: _selector(args)},
            client_config=ClientConfig(
                namesrv_addr=_namesrv(args),
                credentials=credentials_from_args(args),
                trace=args.trace,
                **tls_options(args),
            ),
            message_model="BROADCASTING" if args.broadcast else "CLUSTERING",
            consume_from_where=where,
            consume_timestamp=args.timestamp,
            consume_batch_max_size=batch,
            orderly=args.orderly,  # the handler's results map onto SUCCESS / SUSPEND_CURRENT_QUEUE_A_MOMENT
            client_rebalance=not args.pop,  # --pop: the 5.x broker assigns and the topic is popped
        )
    except ConfigError as exc:  # the group, the timestamp ...
        raise UsageError(f"bad consumer settings: {exc}") from None
    progress = ProgressLine(args.count or None, "consume", enabled=sys.stderr.isatty() and not args.quiet)
    show_progress = progress.enabled
    try:
        await consumer.start()
    except AuthError as exc:
        progress.close()
        return _refused(exc)
    except RocketMQError as exc:
        progress.close()
        return _fail(f"cannot start the consumer: {exc}")

    async def on_signal() -> None:
        await stop.event.wait()
        done.set()
        wake.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(on_signal)
            if not internals(consumer).client.broker_addrs:
                try:
                    await internals(consumer).client.fetch_route(args.topic)
                except TopicNotExist:
                    # the name server answered: the topic may be created any moment (a producer's first
                    # send auto-creates it), as a Java consumer waits for it
                    log.warning(
                        "topic %r does not exist yet: waiting for it (idle exit after %.0f s)",
                        args.topic,
                        args.idle_exit,
                    )
                    tg.start_soon(_await_topic, consumer, args.topic)
                except AuthError as exc:
                    tg.cancel_scope.cancel()
                    return _refused(exc)
                except RocketMQError as exc:
                    tg.cancel_scope.cancel()
                    return _fail(f"cannot reach the cluster: {exc}")
            if t_first is None:
                t_last = time.perf_counter()  # the idle time runs from here, or the last message
            while not done.is_set():
                idle = max(args.idle_exit, _RETRY_WAIT) if awaited_retries else args.idle_exit
                left = t_last + idle - time.perf_counter()  # t_last: the last consumed message
                if left > 0:
                    with anyio.move_on_after(left):
                        await wake.wait()  # done, or the awaited retries came: the idle time changes
                    wake = anyio.Event()
                else:
                    if awaited_retries:
                        log.warning(
                            "%d messages failed on purpose were not redelivered within %.0f s",
                            len(awaited_retries),
                            idle,
                        )
                    break
            tg.cancel_scope.cancel()
    finally:
        progress.close()
        await consumer.stop()
    secs = (t_last - t_first) if t_first is not None else 0.0
    out: dict[str, Any] = {
        "consumed": consumed,
        "unique_keys": len(seen),
        "duplicates": consumed - len(seen),
        "order_violations": order_violations,
        "seconds": round(secs, 3),
        "msgs_per_s": round(consumed / secs, 1) if secs > 0 else 0.0,
        # what duplicates and order_violations compared
        "compared": "every message this run consumed, by key (msg id without one), messages produced "
        "before the run included; order: the key's trailing integer, per queue",
        "produced_before_start": older,
    }
    if older_repeats or older_order_violations:
        out["note"] = (
            f"{older} messages consumed were produced before this run started; {older_repeats} of the "
            f"duplicates and {older_order_violations} of the order violations involve their keys: keys "
            "sent again by a later producer run, not redeliveries or disorder (a new topic, or --from "
            "last, compares this run's messages only)"
        )
    if stop.name is not None:
        out["signal"] = stop.name
        out["stopped_cleanly"] = consumer.stopped_cleanly
    print(json.dumps(out), flush=True)
    if stop.signum is not None and not consumer.stopped_cleanly:
        return 128 + stop.signum
    return 0


async def _await_topic(consumer: Any, topic: str) -> None:
    """Look ``topic`` up every second until the name server knows it, then register with its brokers
    and rebalance at once (the consumer's own route refresh would take up to 30 s)."""
    while True:
        await anyio.sleep(1.0)
        try:
            await internals(consumer).client.update_route(topic)
        except RocketMQError:
            continue
        log.info("topic %r exists now: consuming", topic)
        await internals(consumer).client.send_heartbeat_to_all_brokers()
        consumer.rebalance_now()
        return


# -- main ----------------------------------------------------------------------------------------------


def _common_flags(parser: argparse.ArgumentParser, default: object) -> None:
    """``--no-uvloop`` and ``-v``: accepted before the command and after it (``rmq-async consume ...
    --no-uvloop``); the command's copies default to SUPPRESS so they never undo the ones before it."""
    parser.add_argument(
        "--no-uvloop",
        action="store_true",
        default=False if default is None else default,
        help="use the default asyncio loop instead of uvloop (uvloop is used when installed)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if default is None else default,
        help="log more on stderr: -v INFO, -vv DEBUG (default: warnings only)",
    )


_NAMESRV_HELP = "name server(s), HOST:PORT[;HOST:PORT...] (default: $NAMESRV_ADDR)"

_PRODUCE_EPILOG = """prints one JSON line at the end:
  sent        messages the brokers accepted
  failed      messages whose send failed (each logged); exit 1 when > 0
  seconds     from the first send to the last answer (not start-up, not shutdown)
  msgs_per_s  sent / seconds
exit 2 with one line on stderr when the cluster is unreachable or the topic does not exist
"""

_CONSUME_EPILOG = """prints one JSON line at the end:
  consumed          deliveries the handler acknowledged, redeliveries included (deliveries failed on
                    purpose by --fail-every are not counted)
  unique_keys       distinct messages among them, by key (else message id): what --count counts
  duplicates        consumed - unique_keys: redeliveries (at-least-once: a rebalance, a restart)
  order_violations  first deliveries whose key's trailing number (the send index of `produce`) is lower
                    than the previous one of the same queue (broker, topic, queue id)
  seconds           from the first consumed message to the last (not start-up, not the idle wait)
  msgs_per_s        consumed / seconds
  signal, stopped_cleanly  only when SIGTERM/SIGINT stopped it
SIGTERM or SIGINT stops it gracefully: handlers finish (up to 30 s), offsets are committed, the group
is left, the summary printed, exit 0 (128 + the signal when handlers were still running); a second
signal stops it at once.
"""

_FROM_HELP = (
    "where a group with no committed offset starts (default: %(default)s): first = the oldest message "
    "kept, last = new messages only, timestamp = the first message stored at or after --timestamp. A "
    "group with committed offsets always goes on from them. As the Java client, a real broker answers "
    "'last' and 'timestamp' with offset 0 for a group with no offset while the queue's first messages "
    "are still in memory (a young topic): the consumer then starts from the first message"
)


_TRACE_HELP = (
    "write the message trace (Java's enableMsgTrace) to RMQ_SYS_TRACE_TOPIC, readable by mqadmin "
    "queryMsgTraceById (the broker needs traceTopicEnable=true or topic auto-creation)"
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="rmq-async", description="asyncio RocketMQ client tools")
    p.add_argument("--version", action="version", version=f"rmq-async {__version__}")
    _common_flags(p, None)
    common = Parser(add_help=False)
    _common_flags(common, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True, metavar="{embedded,bench,produce,consume,admin}")
    raw = argparse.RawDescriptionHelpFormatter

    emb = sub.add_parser(
        "embedded",
        help="run an embedded name server + broker(s) until SIGINT/SIGTERM",
        description="Run an embedded name server and broker(s) in this process until SIGINT/SIGTERM "
        "(then the brokers unregister, flush --data-dir and the command exits 0). Prints "
        "namesrv=HOST:PORT first, then one BROKER=HOST:PORT line per broker.",
        parents=[common],
    )
    from ..embedded import cli as embedded_cli

    embedded_cli.add_arguments(emb)

    be = sub.add_parser(
        "bench",
        help="run benchmark scenarios and print one JSON line per scenario",
        description="Run benchmark scenarios against an embedded cluster (a child process) or --namesrv; "
        "one JSON line per scenario and loop on stdout, the table on stderr, result.json, table.txt and "
        "plots under --out. SIGTERM/SIGINT: the runs done so far are reported, exit 0.",
        parents=[common],
    )
    from ..bench import cli as bench_cli

    bench_cli.add_arguments(be)
    add_tls_arguments(be)
    add_credential_arguments(be)

    pr = sub.add_parser(
        "produce",
        help="send N messages and print a JSON summary",
        description="Send --count messages to --topic and print a JSON summary.",
        epilog=_PRODUCE_EPILOG,
        formatter_class=raw,
        parents=[common],
    )
    pr.add_argument("--namesrv", type=namesrv_addr, metavar="ADDR", help=_NAMESRV_HELP)
    pr.add_argument(
        "--topic", required=True, help="the topic (created by the broker on the first send if it may)"
    )
    pr.add_argument("--group", default="rmq_async_cli_producer", help="producer group (default: %(default)s)")
    pr.add_argument(
        "--count", type=count, default=1000, metavar="N", help="messages to send (default: %(default)s)"
    )
    pr.add_argument(
        "--size",
        type=byte_size,
        default=1024,
        metavar="BYTES",
        help="body size in bytes; the body starts with the key (default: %(default)s)",
    )
    pr.add_argument("--tags", metavar="TAG", help="the messages' tag (default: none)")
    pr.add_argument(
        "--property",
        action="append",
        type=_property_arg,
        metavar="KEY=VALUE",
        help="a user property of every message (repeatable), e.g. for consume --sql filters",
    )
    pr.add_argument(
        "--keys-prefix",
        default="k-",
        metavar="P",
        help="message i gets the key P + i; `consume` checks order by that number (default: %(default)s)",
    )
    pr.add_argument(
        "--batch",
        type=positive,
        default=1,
        metavar="B",
        help="messages per send request (a batch send when > 1; default: %(default)s)",
    )
    pr.add_argument(
        "--order-key-mod",
        type=count,
        default=0,
        metavar="M",
        help="send message i to the queue of key i %% M, in order, one sender per key (for --orderly "
        "consumers); 0 = off (default: %(default)s)",
    )
    pr.add_argument(
        "--queues",
        type=positive,
        default=4,
        metavar="Q",
        help="queues a broker gives the topic when it creates it (default: %(default)s)",
    )
    pr.add_argument(
        "--concurrency", type=positive, default=64, metavar="C", help="sends in flight (default: %(default)s)"
    )
    pr.add_argument("--quiet", action="store_true", help="no progress line on a terminal")
    pr.add_argument("--trace", action="store_true", help=_TRACE_HELP)
    add_tls_arguments(pr)
    add_credential_arguments(pr)

    co = sub.add_parser(
        "consume",
        help="consume until N messages or idle, print a JSON summary",
        description="Consume --topic as a member of --group (a push consumer) until --count distinct "
        "messages were consumed or nothing came for --idle-exit seconds, then print a JSON summary.",
        epilog=_CONSUME_EPILOG,
        formatter_class=raw,
        parents=[common],
    )
    co.add_argument("--namesrv", type=namesrv_addr, metavar="ADDR", help=_NAMESRV_HELP)
    co.add_argument("--group", required=True, help="consumer group (letters, digits, _ - %% |; up to 255)")
    co.add_argument(
        "--topic", required=True, help="the topic to consume (waited for if it does not exist yet)"
    )
    co.add_argument(
        "--expr",
        default="*",
        metavar="EXPR",
        help="tag expression, e.g. 'TagA || TagB' (default: %(default)s, every tag)",
    )
    co.add_argument(
        "--sql",
        metavar="EXPR",
        help="a SQL92 filter over message properties instead of tags, e.g. \"region = 'eu' AND amount > "
        '100" (the broker must run with enablePropertyFilter=true)',
    )
    co.add_argument(
        "--count",
        type=count,
        default=0,
        metavar="N",
        help="stop once N distinct messages (by key, else message id) were consumed; the last batch may "
        "bring a few more; 0 = no limit, stop when idle (default: %(default)s)",
    )
    co.add_argument(
        "--idle-exit",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="stop after this many seconds without a message (default: %(default)s)",
    )
    co.add_argument(
        "--from", dest="from_", choices=["first", "last", "timestamp"], default="first", help=_FROM_HELP
    )
    co.add_argument(
        "--timestamp",
        type=epoch_ms,
        metavar="MS|yyyyMMddHHmmss",
        help="with --from timestamp: milliseconds since the epoch, e.g. $(date +%%s)000, or "
        "yyyyMMddHHmmss (Java's consumeTimestamp; default: 30 minutes before the start, as the Java client)",
    )
    co.add_argument(
        "--broadcast",
        action="store_true",
        help="broadcasting: every member gets every message (offsets kept locally)",
    )
    co.add_argument(
        "--orderly", action="store_true", help="orderly consumption (per-queue order under broker locks)"
    )
    co.add_argument(
        "--pop",
        action="store_true",
        help="POP consumption (5.x: client_rebalance=False): the brokers hand any queue's messages to any "
        "member; switch the group first with 'rmq-async admin set-consume-mode --mode POP'",
    )
    co.add_argument("--trace", action="store_true", help=_TRACE_HELP)
    co.add_argument(
        "--fail-every",
        type=count,
        default=0,
        metavar="K",
        help="fail (RECONSUME_LATER) the first delivery of every K-th distinct message, to exercise "
        "retries (they come back after 10 s on a real broker; the idle exit waits up to 60 s for them); "
        "0 = never (default: %(default)s)",
    )
    co.add_argument(
        "--batch",
        type=positive,
        default=None,
        metavar="B",
        help="messages per handler call (the consumer's consume_batch_max_size, 1-1024; a batch comes "
        "from one queue and is acknowledged as one): default 32, or 1 with --fail-every so that exactly "
        "every K-th message fails (with a larger B its whole batch is retried)",
    )
    co.add_argument(
        "--print",
        action="store_true",
        help="print one JSON line per consumed message: topic, queue_id, offset, key, msg_id, tags, "
        "reconsume_times",
    )
    co.add_argument(
        "--print-body",
        action="store_true",
        help="as --print, with the body too (UTF-8; bytes that are not UTF-8 shown as U+FFFD)",
    )
    co.add_argument("--quiet", action="store_true", help="no progress line on a terminal")
    add_tls_arguments(co)
    add_credential_arguments(co)
    from . import admin as cli_admin

    cli_admin.add_arguments(
        sub.add_parser("admin", help="cluster administration (as mqadmin)", parents=[common])
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    use_uvloop = not args.no_uvloop
    try:
        if args.command == "embedded":
            from ..embedded import cli as embedded_cli

            return _run(lambda: embedded_cli.run(args), use_uvloop)
        if args.command == "bench":
            from ..bench import cli as bench_cli

            export_tls_env(args)  # the bench's workers are child processes: they read RMQ_TLS*
            return bench_cli.run(args)
        if args.command == "produce":
            return _run(lambda: _produce(args), use_uvloop)
        if args.command == "consume":
            return _run(lambda: _consume(args), use_uvloop)
        if args.command == "admin":
            from . import admin as cli_admin

            return _run(lambda: cli_admin.run(args, _namesrv(args)), use_uvloop)
    except KeyboardInterrupt:
        return 130
    except (UsageError, ConfigError) as exc:
        return _fail(str(exc))
    except SystemExit as exc:
        if isinstance(exc.code, str):  # raise SystemExit("rmq-async bench: ..."): a usage error too
            print(exc.code, file=sys.stderr, flush=True)
            return 2
        raise
    return 2


if __name__ == "__main__":
    sys.exit(main())
