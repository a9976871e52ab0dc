"""``rmq-async bench``: run benchmark scenarios and report one JSON line per scenario and loop.

Strategy: the harness process stays synchronous. It starts the embedded cluster in an exec'd child
(unless ``--namesrv`` names a cluster), creates a topic and preloads ``--messages`` messages with the
producer (progress bar on a terminal), then execs one worker per run (``rmq_async.bench.worker``),
alternating the loops run by run so drift on a shared machine hits both alike. When both ``push`` and
``raw-pull`` are selected their runs are interleaved (run r of push and run r of raw-pull back to back on
each loop, push first on even r and raw-pull first on odd r), and the push summary's ``vs_raw_pull`` is
the median over those paired runs of push / raw-pull msgs/s, so the speed of a shared VM drifting
between minutes cancels out of the ratio instead of deciding it (``vs_raw_pull_min`` / ``_max`` give
the spread of the per-pair ratios, ``vs_raw_pull_pairs`` their count: more ``--runs``, a steadier
median). Workers print their result as JSON; the harness aggregates medians and spread, prints one
JSON line per (scenario, loop) on stdout and the table on stderr, and writes ``result.json``,
``table.txt`` and PNG plots under ``--out``. Every child dies with the harness (stdin EOF for the
broker, PR_SET_PDEATHSIG for workers). SIGTERM or SIGINT stops the run gracefully: the running worker is
killed (its run is left out), the cluster stopped, and what completed is reported and written as
usual, each summary line with ``"stopped_by"``; exit 0 (a second signal ends the harness at once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..cli.args import byte_size, positive, seconds
from ..cli.auth import credentials_from_args, export_credentials
from ..config import ENV_TLS, ENV_TLS_CA_FILE, Credentials, TLSConfig
from .cluster import ChildCluster, create_topic, preload
from .machine import machine_info
from .report import format_stage_table, format_table, paired_ratio, plot, profile_text, summarize

__all__ = ["DEFAULT_SUITE", "FULL_SUITE", "add_arguments", "run", "run_worker"]

DEFAULT_SUITE = ("push", "raw-pull", "latency", "backlog")
FULL_SUITE = (
    "push",
    "push-plain",
    "push-sleep",
    "push-cpu",
    "push-orderly",
    "lite-pull",
    "raw-pull",
    "latency",
    "backlog",
    "rebalance",
)
#: the scenarios that drain the preloaded topic (the other two make their own traffic)
_PRELOADED = set(FULL_SUITE) - {"latency", "rebalance"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``bench`` options to ``parser``."""
    parser.add_argument(
        "scenario",
        nargs="*",
        default=["default"],
        help=f"scenarios ({', '.join(FULL_SUITE)}) or 'default' ({', '.join(DEFAULT_SUITE)}) or 'all'; "
        "or 'soak' alone: the soak of membership churn and faults (--duration, --rate, --change-every, "
        "--fault-every, --drain, --out; one JSON summary line, exit 1 when a verdict fails)",
    )
    parser.add_argument("--namesrv", help="use this cluster instead of starting an embedded one")
    parser.add_argument(
        "--messages", type=positive, default=200_000, metavar="N", help="messages preloaded (default 200000)"
    )
    parser.add_argument(
        "--size", type=byte_size, default=1024, metavar="BYTES", help="message body bytes (default 1024)"
    )
    parser.add_argument(
        "--queues", type=positive, default=8, metavar="Q", help="queues of the topics (default 8)"
    )
    parser.add_argument(
        "--runs", type=positive, default=3, metavar="R", help="runs per scenario and loop (default 3)"
    )
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop", "both"), default="both", help="event loop (default both)"
    )
    parser.add_argument("--out", default="bench-results", help="output directory (default bench-results)")
    parser.add_argument(
        "--batch", type=positive, default=1, metavar="B", help="push: consume_batch_max_size (default 1)"
    )
    parser.add_argument(
        "--sleep-ms",
        type=float,
        default=1.0,
        metavar="MS",
        help="push-sleep: the handler awaits this (default 1)",
    )
    parser.add_argument(
        "--cpu-us",
        type=float,
        default=100.0,
        metavar="US",
        help="push-cpu: CPU burnt per message (default 100)",
    )
    parser.add_argument(
        "--stall-s",
        type=seconds,
        default=2.0,
        metavar="SECONDS",
        help="backlog: handlers hold this long first (default 2)",
    )
    parser.add_argument(
        "--rate",
        type=rates,
        default=None,
        metavar="MSGS_PER_S[,...]",
        help="latency: offered msgs/s, or several comma-separated (a run of each: 'latency@RATE'; "
        "default: half the push median, else 2000); soak: msgs/s (default 2000)",
    )
    parser.add_argument(
        "--duration",
        "--seconds",
        dest="duration",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="latency: seconds offered (default 10); soak: run time (default 3600)",
    )
    parser.add_argument(
        "--stage-sample",
        type=positive,
        default=1,
        metavar="N",
        help="latency: the consumer times every Nth pulled batch stage by stage (default 1: every one)",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="latency: the consumer's process calls gc.freeze() once started (the collector's "
        "full passes then skip what lived before)",
    )
    parser.add_argument(
        "--plain-handler",
        action="store_true",
        help="latency: the consumer's handler is a plain function (called by the pulling task, "
        "without the hand-off to a consume worker)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="latency: write the CDF plot here too (PNG; matplotlib, the bench extra)",
    )
    parser.add_argument(
        "--json", action="store_true", help="only the JSON summary lines (no table or progress on stderr)"
    )
    parser.add_argument("--profile", action="store_true", help="add one cProfile'd push run (asyncio)")
    parser.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    parser.add_argument(
        "--acl",
        action="store_true",
        help="the embedded cluster enforces ACL (an admin account made for the run) and every client "
        "signs its requests: the cost of ACL (with --namesrv: use --access-key/--secret-key instead)",
    )
    g = parser.add_argument_group(
        "TLS of the embedded cluster",
        "Without --namesrv, any client TLS option (--tls, --tls-ca, --tls-insecure, ...) runs the embedded "
        "cluster with TLS too, so every client connection is TLS: the cost of TLS (as --acl is for ACL). "
        "Its certificate is generated for 127.0.0.1 with trustme (a test dependency: pip install trustme) "
        "and trusted by the clients unless --tls-ca or --tls-insecure says otherwise; without trustme, "
        "give --tls-server-cert/--tls-server-key (and --tls-ca for the clients, or --tls-insecure).",
    )
    g.add_argument(
        "--tls-mode",
        choices=("permissive", "enforcing"),
        default="enforcing",
        help="the embedded cluster's TLS mode (default enforcing: plain connections are closed)",
    )
    g.add_argument("--tls-server-cert", metavar="FILE", help="the embedded cluster's certificate chain (PEM)")
    g.add_argument(
        "--tls-server-key",
        metavar="FILE",
        help="its private key (PEM; unless in the chain file); password: $RMQ_EMBEDDED_TLS_KEY_PASSWORD",
    )
    from .soak import add_soak_arguments

    add_soak_arguments(parser)


def rates(text: str) -> list[float]:
    """``--rate``: one msgs/s figure or several, comma-separated, each > 0."""
    out: list[float] = []
    for part in text.split(","):
        try:
            r = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a rate in msgs/s: {part!r}") from None
        if not 0 < r < float("inf"):
            raise argparse.ArgumentTypeError(f"a rate must be > 0 msgs/s, got {part}")
        out.append(r)
    return out


def _latency_labels(args: argparse.Namespace, push: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """The latency runs of one loop: (label, rate) for each ``--rate``, labelled ``latency`` when
    there is one and ``latency@RATE`` when there are several; without ``--rate``, half the push
    median (push runs before latency), else 2000 msgs/s."""
    if args.rate:
        if len(args.rate) == 1:
            return [("latency", args.rate[0])]
        return [(f"latency@{r:g}", r) for r in args.rate]
    got = sorted(x["msgs_per_s"] for x in push if x.get("msgs_per_s"))
    return [("latency", got[len(got) // 2] / 2 if got else 2000.0)]


def _scenarios(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        expand = {"default": DEFAULT_SUITE, "all": FULL_SUITE}.get(n, (n,))
        for s in expand:
            if s not in FULL_SUITE:
                raise SystemExit(f"rmq-async bench: unknown scenario {s!r} (known: {', '.join(FULL_SUITE)})")
            if s not in out:
                out.append(s)
    # push first: the latency scenario offers half of what push reached
    return sorted(out, key=lambda s: FULL_SUITE.index(s))


def _plan(scenarios: list[str], runs: int, loops: list[str]) -> list[tuple[str, int, str]]:
    """The (scenario, run index, loop) steps in the order they run: scenario by scenario, run by run,
    loops alternating; push and raw-pull (when both are selected) interleaved at push's place, run r of
    each back to back on each loop, push first on even r and raw-pull first on odd r (ABBA)."""
    paired = "push" in scenarios and "raw-pull" in scenarios
    steps: list[tuple[str, int, str]] = []
    for sc in scenarios:
        if paired and sc == "raw-pull":
            continue  # run with push
        for r in range(runs):
            for lp in loops:
                if paired and sc == "push":
                    pair = ("push", "raw-pull") if r % 2 == 0 else ("raw-pull", "push")
                    steps += [(p, r, lp) for p in pair]
                else:
                    steps.append((sc, r, lp))
    return steps


def run_worker(role: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Exec one worker run and return its result dict (``{"error": ...}`` if it failed)."""
    params = {**params, "parent_pid": os.getpid()}
    cmd = [sys.executable, "-m", "rmq_async.bench.worker", role, json.dumps(params)]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    text = proc.stdout.decode(errors="replace")
    for line in reversed(text.strip().splitlines()):
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict):
            return result
    return {"error": f"worker exited {proc.returncode} without a result (stdout tail {text[-200:]!r})"}


class _Stopped(BaseException):
    """Raised by the SIGTERM/SIGINT handler of :func:`run` (a BaseException: no ``except Exception``
    on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _raise_stopped(signum: int, frame: object) -> None:
    for sig in _STOP_SIGNALS:  # a second signal: the default disposition, at once
        signal.signal(sig, signal.SIG_DFL)
    raise _Stopped(signum)


def _install_stop_handlers() -> dict[int, Any]:
    """SIGTERM/SIGINT raise :class:`_Stopped`; returns the handlers to put back (none off the main
    thread, where signals cannot be handled)."""
    try:
        return {sig: signal.signal(sig, _raise_stopped) for sig in _STOP_SIGNALS}
    except ValueError:
        return {}


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _short(r: dict[str, Any]) -> str:
    if "error" in r or "skipped" in r:
        return json.dumps(r)[:300]
    keys = ("msgs_per_s", "p50_ms", "p99_ms", "peak_rss_mb", "join_s", "leave_s", "offered_msgs_per_s")
    return ", ".join(f"{k}={r[k]:,.1f}" for k in keys if isinstance(r.get(k), (int, float)))


def _bench_acl(tmp: Path, global_white: tuple[str, ...] = ()) -> tuple[Credentials, str]:
    """An ACL file for the embedded cluster with one admin account made for this run, and its keys
    (``global_white``: the file's ``globalWhiteRemoteAddresses``, which pass unsigned requests)."""
    creds = Credentials(access_key="benchAdmin", secret_key=secrets.token_urlsafe(24))
    path = tmp / "plain_acl.yml"
    account = {
        "accessKey": creds.access_key,
        "secretKey": creds.secret_key.get_secret_value(),
        "admin": True,
        "defaultTopicPerm": "PUB|SUB",
        "defaultGroupPerm": "PUB|SUB",
    }
    acl = {"globalWhiteRemoteAddresses": list(global_white), "accounts": [account]}
    path.write_text(json.dumps(acl))  # JSON is YAML
    path.chmod(0o600)
    return creds, str(path)


def _tls_wanted(args: argparse.Namespace) -> bool:
    """True when the clients will use TLS: a client TLS option was given (the options
    ``cli.tls.add_tls_arguments`` adds) or the environment turns TLS on (``RMQ_TLS=1``)."""
    names = ("tls", "tls_insecure", "tls_ca", "tls_cert", "tls_key", "tls_server_hostname")
    if any(getattr(args, n, None) for n in names):
        return True
    try:
        return TLSConfig.from_env() is not None
    except ValueError:  # a bad combination: the clients will say so
        return True


def _bench_tls(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The embedded cluster's TLS for ``bench --tls``: ``ChildCluster`` keyword arguments. A generated
    certificate (trustme) is trusted by this process's and the workers' clients through ``RMQ_TLS_CA_FILE``
    unless ``--tls-ca`` / ``--tls-insecure`` were given."""
    cert, key = args.tls_server_cert, args.tls_server_key
    if cert is None:
        if key is not None:
            raise SystemExit("rmq-async bench: --tls-server-key needs --tls-server-cert")
        try:
            import trustme
        except ImportError:
            raise SystemExit(
                "rmq-async bench --tls: generating the embedded cluster's certificate needs trustme "
                "(pip install trustme); or give --tls-server-cert/--tls-server-key and --tls-ca"
            ) from None
        ca = trustme.CA()
        cert = str(tmp / "server.pem")
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(cert)
        if not (getattr(args, "tls_ca", None) or getattr(args, "tls_insecure", False)):
            ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
            os.environ.update({ENV_TLS: "1", ENV_TLS_CA_FILE: str(tmp / "ca.pem")})
    os.environ[ENV_TLS] = "1"  # the harness's own clients (topic, preload) and the workers
    return {"tls_mode": args.tls_mode, "tls_cert": cert, "tls_key": key}


def run(args: argparse.Namespace) -> int:
    """Run the scenarios in ``args``; returns the exit code (1 if a run failed). ``--json``: nothing
    but the JSON summary lines (the harness's progress and tables on stderr are dropped)."""
    if getattr(args, "json", False):
        with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
            return _run(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    if "soak" in args.scenario:
        if args.scenario != ["soak"]:
            raise SystemExit("rmq-async bench: soak runs alone")
        if args.rate is not None and len(args.rate) != 1:
            raise SystemExit("rmq-async bench soak: --rate takes one figure")
        from .soak import run_cli

        return run_cli(args)
    if args.duration is None:
        args.duration = 10.0
    scenarios = _scenarios(args.scenario)
    loops = ["asyncio", "uvloop"] if args.loop == "both" else [args.loop]
    if getattr(args, "no_uvloop", False):  # rmq-async --no-uvloop bench: the default loop only
        if "asyncio" not in loops:
            raise SystemExit("rmq-async bench: --no-uvloop contradicts --loop uvloop")
        loops = ["asyncio"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]])
    wall0 = time.perf_counter()
    acl_dir = tempfile.TemporaryDirectory() if args.acl else None
    creds = credentials_from_args(args)
    acl_file = None
    if acl_dir is not None:
        if args.namesrv:
            raise SystemExit("rmq-async bench: --acl is for the embedded cluster; with --namesrv pass keys")
        creds, acl_file = _bench_acl(Path(acl_dir.name))
    export_credentials(creds)  # the workers (child processes) sign with them too
    tls_server = args.tls_server_cert or args.tls_server_key
    if args.namesrv and tls_server:
        raise SystemExit("rmq-async bench: --tls-server-cert/--tls-server-key are for the embedded cluster")
    tls_dir = None
    tls_env = {k: os.environ.get(k) for k in (ENV_TLS, ENV_TLS_CA_FILE)}  # restored at the end
    if not args.namesrv and (tls_server or _tls_wanted(args)):
        tls_dir = tempfile.TemporaryDirectory()
    tls_kw = _bench_tls(args, Path(tls_dir.name)) if tls_dir is not None else {}
    cluster = None if args.namesrv else ChildCluster(queues=args.queues, acl_file=acl_file, **tls_kw)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    summaries: list[dict[str, Any]] = []
    profile = None
    namesrv = args.namesrv or ""
    stopped_by: str | None = None
    previous_handlers = _install_stop_handlers()
    try:
        namesrv = args.namesrv or cluster.start()  # type: ignore[union-attr]
        tls_note = f", TLS {args.tls_mode}" if tls_dir is not None else ""
        _log(f"cluster: {namesrv}" + (f" (embedded, child process{tls_note})" if cluster else ""))
        topic = f"Bench_{os.getpid()}_{int(time.time())}"
        base = {
            "namesrv": namesrv,
            "topic": topic,
            "messages": args.messages,
            "size": args.size,
            "queues": args.queues,
            "batch": args.batch,
            "sleep_ms": args.sleep_ms,
            "cpu_us": args.cpu_us,
            "duration": args.duration,
            "stall_s": args.stall_s,
            "timeout": max(60.0, args.messages / 1000),
            "acl": creds is not None,  # never the keys: params go on the workers' command lines
            "tls": tls_dir is not None or _tls_wanted(args),
            "stage_sample": args.stage_sample,
            "gc_freeze": args.gc_freeze,
            "plain_handler": args.plain_handler,
        }
        preload_rate = None
        if _PRELOADED & set(scenarios) or args.profile:
            asyncio.run(create_topic(namesrv, topic, args.queues))
            preload_rate = asyncio.run(preload(namesrv, topic, args.messages, args.size))
            _log(f"preloaded {args.messages:,} x {args.size} B, {args.queues} queues: {preload_rate:,.0f}/s")
        stopped: set[str] = set()  # a skipped result stops further runs of its scenario
        for sc, r, lp in _plan(scenarios, args.runs, loops):
            if sc in stopped:
                continue
            params = {**base, "scenario": sc, "loop": lp}
            labelled: list[tuple[str, float | None]] = [(sc, None)]
            if sc == "latency":
                labelled = [*_latency_labels(args, results.get(("push", lp), []))]
            for label, rate in labelled:
                if rate is not None:
                    params["rate"] = rate
                res = run_worker(sc, params, base["timeout"] + args.duration + 120)
                results.setdefault((label, lp), []).append(res)
                _log(f"{label} / {lp} run {r + 1}/{args.runs}: {_short(res)}")
            if "skipped" in res:
                stopped.add(sc)
        if args.profile:
            with tempfile.TemporaryDirectory() as tmp:
                pfile = str(Path(tmp) / "push.pstats")
                res = run_worker("push", {**base, "loop": "asyncio", "profile": pfile}, base["timeout"] + 60)
                profile = {"msgs_per_s_under_profiler": res.get("msgs_per_s"), "text": profile_text(pfile)}
                _log(f"profiled push run: {_short(res)}")
    except _Stopped as exc:
        stopped_by = signal.Signals(exc.signum).name
        _log(f"{stopped_by}: stopping; the runs that completed are reported")
    finally:
        if cluster is not None:
            cluster.stop()
        if acl_dir is not None:
            acl_dir.cleanup()
        if tls_dir is not None:
            tls_dir.cleanup()
            for k, v in tls_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    # scenario by scenario, then loop, whatever order the runs took (a latency@RATE label goes with
    # its scenario, in the order of --rate)
    results = {
        (label, lp): results[label, lp]
        for sc in scenarios
        for lp in loops
        for label, loop in list(results)
        if loop == lp and label.partition("@")[0] == sc
    }
    for (sc, lp), runs in results.items():
        summary = summarize(sc, lp, namesrv, runs)
        if sc == "push":
            summary.update(paired_ratio(runs, results.get(("raw-pull", lp), [])))
        if stopped_by is not None:
            summary["stopped_by"] = stopped_by
        summaries.append(summary)
    table = format_table(summaries)
    stage_table = format_stage_table(summaries)
    if stage_table:
        table += "\n\n" + stage_table
    wall = time.perf_counter() - wall0
    plots = [] if args.no_plots else plot(results, out, cdf_file=getattr(args, "plot", None))
    doc = {
        "command": command,
        "argv": sys.argv,
        "args": {k: v for k, v in vars(args).items() if not callable(v)},
        "machine": machine_info(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": wall,
        "preload_msgs_per_s": preload_rate,
        "summaries": summaries,
        "runs": {f"{sc}/{lp}": v for (sc, lp), v in results.items()},
        "profile": profile,
        "plots": plots,
        "stopped_by": stopped_by,
    }
    (out / "result.json").write_text(json.dumps(doc, indent=1))
    (out / "table.md").write_text(format_table(summaries, markdown=True) + "\n")
    (out / "table.txt").write_text(f"{command}\n\n{table}\n" + (f"\n{profile['text']}" if profile else ""))
    print(table, file=sys.stderr)
    if profile:
        print(profile["text"], file=sys.stderr)
    _log(f"wall {wall:.0f} s; wrote {', '.join(['result.json', 'table.txt', *plots])} in {out}")
    for s in summaries:
        print(json.dumps({k: v for k, v in s.items() if k != "errors" or v}), flush=True)
    return 1 if any(s["errors"] for s in summaries) else 0
