"""``python -m rmq_async.embedded`` / ``rmq-async embedded``: run an embedded cluster until signalled.

Bad input (a count below 1, a port outside 0-65535, bad delay levels, a file that cannot be read, a
port in use) is one line and exit status 2, as the other subcommands: the argument types refuse what
they can, and :func:`run` raises :class:`~rmq_async.errors.ConfigError` for what only the start shows.

Strategy: parse arguments into an :class:`~.cluster.EmbeddedCluster`, print ``namesrv=127.0.0.1:P``
as the first stdout line (flushed) and then one ``<broker>=<addr>`` line per broker, serve until
SIGINT/SIGTERM (or stdin EOF with ``--exit-on-stdin-eof``, which a parent process uses so the child
never outlives it), then shut down cleanly (brokers unregister and flush their data dir); exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys

import anyio

from ..config import Timing, parse_delay_levels
from ..errors import ConfigError
from .acl import AclConfig
from .cluster import ACL_ENV, TLS_KEY_PASSWORD_ENV, EmbeddedCluster
from .store import MAX_TRANSFER_BYTES, MAX_TRANSFER_COUNT
from .tls import ServerTLS, TLSMode

__all__ = ["add_arguments", "run"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port, 0 (a free one) to 65535, not {text!r}")
    return value


def _delay_levels(text: str) -> str:
    try:
        parse_delay_levels(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _readable_file(text: str) -> str:
    """A file that exists and can be read (checked now: the cluster would fail with a traceback)."""
    try:
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {exc.strerror or exc}") from None
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the embedded-cluster options to ``parser``."""
    parser.add_argument("--brokers", type=_positive, default=1, help="number of brokers (default 1)")
    parser.add_argument(
        "--queues", type=_positive, default=4, help="queues of TBW102 and of created topics (default 4)"
    )
    parser.add_argument(
        "--port", type=_port, default=9876, help="name server port; 0 picks a free one (default 9876)"
    )
    parser.add_argument(
        "--data-dir", default=None, help="keep messages, offsets and topics in this directory"
    )
    parser.add_argument(
        "--delay-levels",
        type=_delay_levels,
        default=None,
        help='delay levels, e.g. "1s 5s 10s" (default: timing)',
    )
    parser.add_argument(
        "--flavour", type=int, choices=(4, 5), default=4, help="answer as RocketMQ 4.9.8 or 5.3.3 (default 4)"
    )
    parser.add_argument(
        "--timing",
        choices=("default", "fast"),
        default="default",
        help="timer profile: default = the Java brokers' timers, fast = about 1/20 of them, for tests "
        "(default: default)",
    )
    parser.add_argument("--timing-json", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-auto-create-topic", action="store_true", help="refuse sends to unknown topics")
    parser.add_argument(
        "--enable-property-filter",
        action="store_true",
        help="serve SQL92 subscriptions (the broker's enablePropertyFilter, off by default)",
    )
    parser.add_argument(
        "--filter-support-retry",
        action="store_true",
        help="filter retry topics by the group's SQL92 filter too (filterSupportRetry; 4.x flavour)",
    )
    parser.add_argument(
        "--trace-topic-enable",
        action="store_true",
        help="create the message trace topic RMQ_SYS_TRACE_TOPIC at start (traceTopicEnable)",
    )
    parser.add_argument(
        "--order-message-enable",
        action="store_true",
        help="put each topic's order config (mqadmin updateTopic -o true) in its route (orderMessageEnable)",
    )
    parser.add_argument(
        "--max-transfer-count",
        type=_positive,
        default=MAX_TRANSFER_COUNT,
        metavar="N",
        help="messages one pull answers at most (maxTransferCountOnMessageInMemory; default %(default)s)",
    )
    parser.add_argument(
        "--max-transfer-bytes",
        type=_positive,
        default=MAX_TRANSFER_BYTES,
        metavar="N",
        help="bytes of messages one pull answers at most, a first message always whole "
        "(maxTransferBytesOnMessageInMemory; default %(default)s)",
    )
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when stdin is closed")
    parser.add_argument(
        "--acl-file",
        "--acl",
        dest="acl_file",
        type=_readable_file,
        default=None,
        metavar="PATH",
        help="enforce ACL with the accounts of this plain_acl.yml (the real broker's format)",
    )
    tls = parser.add_argument_group("TLS (the real broker's tls.server.* settings)")
    tls.add_argument(
        "--tls-mode",
        choices=("disabled", "permissive", "enforcing"),
        default=None,
        help="TLS mode of the name server and brokers (default: disabled; permissive with --tls-cert)",
    )
    tls.add_argument("--tls-cert", type=_readable_file, default=None, help="server certificate chain (PEM)")
    tls.add_argument(
        "--tls-key",
        type=_readable_file,
        default=None,
        help=f"server private key (PEM); password: ${ENV_TLS_KEY_PASSWORD}",
    )
    tls.add_argument(
        "--tls-ca",
        type=_readable_file,
        default=None,
        help="CA certificates that client certificates must chain to",
    )
    tls.add_argument(
        "--tls-client-auth",
        choices=("none", "optional", "require"),
        default="none",
        help="client certificates: tls.server.need.client.auth (default none)",
    )


#: the server key's password (never on the command line, where ``ps`` shows it)
ENV_TLS_KEY_PASSWORD = TLS_KEY_PASSWORD_ENV


def server_tls(args: argparse.Namespace) -> ServerTLS | None:
    """The :class:`ServerTLS` of the ``--tls-*`` options; None without them. Bad combinations exit 2."""
    mode: TLSMode | None = args.tls_mode or ("permissive" if args.tls_cert else None)
    if mode is None:
        return None
    try:
        return ServerTLS(
            mode=mode,
            cert_file=args.tls_cert,
            key_file=args.tls_key,
            key_password=os.environ.get(ENV_TLS_KEY_PASSWORD) or None,
            ca_file=args.tls_ca,
            client_auth=args.tls_client_auth,
        )
    except ValueError as exc:
        raise SystemExit(f"rmq-async embedded: {exc}") from None


def _timing(args: argparse.Namespace) -> Timing:
    if args.timing_json:
        return Timing.model_validate_json(args.timing_json)
    return Timing.fast() if args.timing == "fast" else Timing()


def _acl(args: argparse.Namespace) -> AclConfig | None:
    if args.acl_file:
        try:
            return AclConfig.load(args.acl_file)
        except (OSError, ValueError) as exc:  # unreadable, or not a plain_acl.yml
            raise ConfigError(f"embedded: --acl-file {args.acl_file}: {exc}") from None
    text = os.environ.get(ACL_ENV)  # a parent EmbeddedCluster(process=True, acl=...)
    return AclConfig.from_mapping(json.loads(text)) if text else None


async def run(args: argparse.Namespace) -> int:
    """Run the cluster described by ``args`` until SIGINT/SIGTERM; returns the exit code."""
    cluster = EmbeddedCluster(
        args.brokers,
        args.queues,
        timing=_timing(args),
        flavour=args.flavour,
        data_dir=args.data_dir,
        port=args.port,
        delay_levels=args.delay_levels,
        auto_create_topic=not args.no_auto_create_topic,
        enable_property_filter=args.enable_property_filter,
        filter_support_retry=args.filter_support_retry,
        trace_topic_enable=args.trace_topic_enable,
        order_message_enable=args.order_message_enable,
        max_transfer_count=args.max_transfer_count,
        max_transfer_bytes=args.max_transfer_bytes,
        acl=_acl(args),
        tls=server_tls(args),
    )
    async with contextlib.AsyncExitStack() as stack:
        await _start(stack, cluster, args.port)
        tg = await stack.enter_async_context(anyio.create_task_group())
        lines = [f"namesrv={cluster.namesrv_addr}"] + [f"{b.name}={b.addr}" for b in cluster.brokers]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        if args.exit_on_stdin_eof:
            tg.start_soon(_watch_stdin, tg.cancel_scope)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
        tg.cancel_scope.cancel()
    return 0


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError (a port in use; an ssl.SSLError: a key that does not match its certificate) behind
    a failed start."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _os_error(inner)) is not None:
                return found
    return None


async def _start(stack: contextlib.AsyncExitStack, cluster: EmbeddedCluster, port: int) -> None:
    """Enter ``cluster`` on ``stack``; a start the machine refuses (the port in use, TLS files that do
    not work) is a ConfigError, one line, not a traceback."""
    try:
        await stack.enter_async_context(cluster)
    except Exception as exc:
        err = _os_error(exc)
        if err is None:
            raise
        raise ConfigError(f"embedded: cannot start the cluster on port {port}: {err}") from None


async def _watch_stdin(scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` when stdin reaches EOF (the parent died or closed the pipe).

    A reader callback on fd 0 rather than a blocking read in a thread, so shutdown never waits for it.
    """
    loop = asyncio.get_running_loop()
    eof = asyncio.Event()
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            eof.set()

    loop.add_reader(fd, readable)
    try:
        await eof.wait()
        scope.cancel()
    finally:
        loop.remove_reader(fd)
