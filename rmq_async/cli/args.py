"""The command line's parser and value types: a bad value is one line ``rmq-async: ...`` and exit 2.

argparse prints the usage and ``prog: error: ...`` on two lines and a traceback escapes from values
checked later (a pydantic model, the consumer). :class:`Parser` makes every argparse error one line
pointing at ``--help``; the types below refuse what is plainly wrong when the command line is read
(negative counts, a name server that is not ``host:port``, a timestamp in seconds); :class:`UsageError`
carries what is found wrong later to :func:`rmq_async.cli.main`, which prints it the same way.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from ..config import consume_timestamp, namesrv_addresses

__all__ = [
    "Parser",
    "UsageError",
    "byte_size",
    "count",
    "epoch_ms",
    "namesrv_addr",
    "positive",
    "seconds",
]


class UsageError(Exception):
    """A value of the command line that is wrong (exit 2, one line)."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr, ``rmq-async: <command>: <message>``,
    with exit status 2."""

    def error(self, message: str) -> NoReturn:
        head, _, command = self.prog.partition(" ")  # "rmq-async consume"
        where = f"{command}: " if command else ""
        print(f"{head}: {where}{message} (see {self.prog} --help)", file=sys.stderr, flush=True)
        sys.exit(2)


def count(text: str) -> int:
    """An integer >= 0."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def positive(text: str) -> int:
    """An integer >= 1."""
    n = count(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def byte_size(text: str) -> int:
    """A size in bytes, >= 0."""
    return count(text)


def seconds(text: str) -> float:
    """A duration in seconds, >= 0 (a float)."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not s >= 0 or s == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return s


def epoch_ms(text: str) -> int | str:
    """Milliseconds since the epoch, or Java's ``yyyyMMddHHmmss`` (14 digits), by the consumer config's
    rule (:func:`~rmq_async.config.consume_timestamp`): seconds are refused with a hint."""
    value: int | str = text
    if not (len(text) == 14 and text.isdigit()):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not milliseconds since the epoch: {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    try:
        return consume_timestamp(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def namesrv_addr(text: str) -> str:
    """``host:port`` or several separated by ``;`` (Java's ``namesrvAddr``), or Java's
    ``http://host:port`` endpoint: the client's own rule (:func:`~rmq_async.config.namesrv_addresses`),
    so the command line refuses what a client would and says it the same way."""
    try:
        return ";".join(namesrv_addresses(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
