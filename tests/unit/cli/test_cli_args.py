"""The CLI's common flags work before and after the command, as users type them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rmq_async
from rmq_async.cli.app import build_parser, main
from rmq_async.config import namesrv_addresses

BASE = ["consume", "--group", "g", "--topic", "T"]


@pytest.mark.parametrize(
    ("argv", "no_uvloop", "verbose"),
    [
        (BASE, False, 0),
        (["--no-uvloop", "-vv", *BASE], True, 2),
        ([*BASE, "--no-uvloop", "-v"], True, 1),
        (["--no-uvloop", *BASE, "-v"], True, 1),  # a flag after the command never undoes one before it
        (["produce", "--topic", "T", "--no-uvloop"], True, 0),
        (["embedded", "--no-uvloop"], True, 0),
        (["bench", "push", "--no-uvloop"], True, 0),
    ],
)
def test_common_flags_before_or_after_the_command(argv: list[str], no_uvloop: bool, verbose: int) -> None:
    args = build_parser().parse_args(argv)
    assert (args.no_uvloop, args.verbose) == (no_uvloop, verbose)


NS = ["--namesrv", "127.0.0.1:9"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["consume", *NS, "--group", "g", "--topic", "T", "--count", "-1"],
            "rmq-async: consume: argument --count: must be >= 0, got -1",
        ),
        (
            ["consume", "--namesrv", "abc", "--group", "g", "--topic", "T"],
            "rmq-async: consume: argument --namesrv: bad name server address 'abc': expected host:port",
        ),
        (
            # the client's own rule and words (config.namesrv_addresses)
            ["consume", "--namesrv", "127.0.0.1:9876,127.0.0.2:9876", "--group", "g", "--topic", "T"],
            "rmq-async: consume: argument --namesrv: name server addresses are separated by ';', not ','",
        ),
        (
            ["produce", "--namesrv", "http://a:1;http://b:2", "--topic", "T"],
            "an http:// name server endpoint is one address",
        ),
        (
            ["consume", *NS, "--group", "g", "--topic", "T", "--idle-exit", "-3"],
            "rmq-async: consume: argument --idle-exit: must be a finite",
        ),
        (
            [
                "consume",
                *NS,
                "--group",
                "g",
                "--topic",
                "T",
                "--from",
                "timestamp",
                "--timestamp",
                "1732580000",
            ],
            "if you meant seconds (2024-11-26 00:13:20 UTC), give 1732580000000",
        ),
        (
            ["consume", *NS, "--group", "g", "--topic", "T", "--timestamp", "1732580000000"],
            "rmq-async: --timestamp is for --from timestamp",
        ),
        (
            ["consume", *NS, "--group", "a b", "--topic", "T"],
            "rmq-async: bad consumer settings: ConsumerConfig.group",
        ),
        (
            ["consume", *NS, "--group", "g", "--topic", "T", "--batch", "0"],
            "rmq-async: consume: argument --batch: must be >= 1, got 0",
        ),
        (
            ["consume", *NS, "--group", "g", "--topic", "T", "--batch", "2000"],
            "rmq-async: bad consumer settings: ConsumerConfig.consume_batch_max_size",
        ),
        (
            ["produce", *NS, "--topic", "T", "--count", "-5"],
            "rmq-async: produce: argument --count: must be >= 0, got -5",
        ),
        (
            ["produce", *NS, "--topic", "T", "--size", "x"],
            "rmq-async: produce: argument --size: not a whole number: 'x'",
        ),
        (
            ["produce", *NS, "--topic", "T", "--batch", "0"],
            "rmq-async: produce: argument --batch: must be >= 1, got 0",
        ),
        (
            ["bench", "push", "--messages", "-2"],
            "rmq-async: bench: argument --messages: must be >= 0, got -2",
        ),
        (
            ["consume", "--group", "g", "--topic", "T", "--bogus"],
            "rmq-async: unrecognized arguments: --bogus",
        ),
        ([], "rmq-async: the following arguments are required"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    code: str | int | None
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code  # argparse's own exit
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("rmq-async: ") and line in err, err


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("127.0.0.1:9876", "127.0.0.1:9876"),
        (" a:1 ; b:2 ;", "a:1;b:2"),
        ("http://ns.example:9876", "ns.example:9876"),  # Java's name server endpoint
        ("[::1]:9876", "[::1]:9876"),
    ],
)
def test_namesrv_is_read_as_a_client_reads_namesrv_addr(given: str, taken: str) -> None:
    assert namesrv_addresses(given) == taken.split(";")
    for argv in (
        ["consume", "--namesrv", given, "--group", "g", "--topic", "T"],
        ["admin", "topic", "list", "--namesrv", given],
    ):
        assert build_parser().parse_args(argv).namesrv == taken


def test_no_name_server_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "nonsense")
    assert main(["consume", "--group", "g", "--topic", "T"]) == 2
    assert (
        capsys.readouterr().err
        == "rmq-async: NAMESRV_ADDR: bad name server address 'nonsense': expected host:port, several"
        " separated by ';' (host:port;host:port)\n"
    )
    monkeypatch.delenv("NAMESRV_ADDR")
    assert main(["produce", "--topic", "T"]) == 2
    assert "no name server: pass --namesrv HOST:PORT or set NAMESRV_ADDR" in capsys.readouterr().err


def test_python_dash_m_rmq_async_is_the_command_and_has_a_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rmq_async", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"rmq-async {rmq_async.__version__}"
    bad = subprocess.run(
        [sys.executable, "-m", "rmq_async", "consume", "--group", "g", "--topic", "T", "--count", "-1"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.startswith("rmq-async: ")


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (
            "consume",
            [
                "--idle-exit SECONDS",
                "milliseconds since the epoch",
                "(default: first)",
                "--count N",
                "unique_keys",
                "from the first consumed message to the last",
                "--print-body",
                "--batch B",
                "default 32, or 1 with --fail-every",
                "SIGTERM",
            ],
        ),
        ("produce", ["--size BYTES", "body size in bytes", "(default: 1024)", "--count N", "msgs_per_s"]),
        ("bench", ["--messages N", "(default 200000)", "--size BYTES"]),
        ("embedded", ["--timing", "about 1/20", "(default 4)", "--data-dir"]),
    ],
)
def test_help_gives_meaning_unit_and_default(
    command: str, words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for w in words:
        assert " ".join(w.split()) in text, w


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--brokers", "0"], "--brokers"),
        (["--queues", "0"], "--queues"),
        (["--delay-levels", "1x"], "--delay-levels"),
        (["--acl-file", "/nope.yml"], "/nope.yml"),
        (["--tls-cert", "/nope.pem"], "/nope.pem"),
        (["--tls-cert", "/nope.pem", "--tls-key", "/nope.key"], "/nope.pem"),
        (["--port", "-1"], "--port"),
        (["--port", "99999"], "--port"),
    ],
)
def test_a_bad_embedded_option_is_one_line_and_exit_2(
    extra: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code: str | int | None
    try:
        code = main(["embedded", "--port", "0", *extra])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rmq-async: ") and words in err, err
    assert "Traceback" not in err


def test_an_embedded_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code: str | int | None
        try:
            code = main(["embedded", "--port", str(port)])
        except SystemExit as exc:
            code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rmq-async: ") and str(port) in err, err
