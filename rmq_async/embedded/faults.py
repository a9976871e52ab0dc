"""Fault injection for the embedded servers (tests only).

Strategy: a rule table keyed by request code, consulted by the server for every incoming request
before it is processed. ``drop`` discards the request unprocessed (as if lost on the way: no answer),
``refuse`` answers with the given code and remark without processing, ``delay`` processes the request
at once and holds its answer back for the given time. Rules apply to both requests and oneways (a
oneway has no answer to refuse or delay, so only ``drop`` changes it).

``recording()`` keeps every request the server receives, decoded as it arrived (its serialize type,
language and version included), before any rule applies: what a client put on the wire.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..protocol.command import RemotingCommand

__all__ = ["Faults", "Rule"]


class Rule:
    __slots__ = ("count", "kind", "remark", "response_code", "seconds")

    def __init__(
        self,
        kind: str,
        *,
        seconds: float = 0.0,
        count: int | None = None,
        response_code: int = 0,
        remark: str | None = None,
    ) -> None:
        self.kind = kind
        self.seconds = seconds
        self.count = count
        self.response_code = response_code
        self.remark = remark


class Faults:
    """Per-request-code faults of one server (a broker or the name server)."""

    __slots__ = ("_recordings", "_rules")

    def __init__(self) -> None:
        self._rules: dict[int, Rule] = {}
        self._recordings: list[list[RemotingCommand]] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[RemotingCommand]]:
        """``with broker.faults.recording() as seen``: ``seen`` gets every request received meanwhile."""
        seen: list[RemotingCommand] = []
        self._recordings.append(seen)
        try:
            yield seen
        finally:
            self._recordings.remove(seen)

    def saw(self, cmd: RemotingCommand) -> None:
        """(for the server) A request arrived."""
        for seen in self._recordings:
            seen.append(cmd)

    def delay(self, code: int, seconds: float) -> None:
        """Answer requests with ``code`` only after ``seconds`` (they are processed at once)."""
        self._rules[int(code)] = Rule("delay", seconds=seconds)

    def drop(self, code: int, count: int | None = None) -> None:
        """Discard the next ``count`` requests with ``code`` (all of them if None): no answer."""
        self._rules[int(code)] = Rule("drop", count=count)

    def refuse(self, code: int, response_code: int, remark: str | None = None) -> None:
        """Answer requests with ``code`` with ``response_code`` and ``remark``, unprocessed."""
        self._rules[int(code)] = Rule("refuse", response_code=int(response_code), remark=remark)

    def clear(self, code: int | None = None) -> None:
        """Remove the rule for ``code``, or every rule."""
        if code is None:
            self._rules.clear()
        else:
            self._rules.pop(int(code), None)

    def __bool__(self) -> bool:
        return bool(self._rules) or bool(self._recordings)

    def take(self, code: int) -> Rule | None:
        """The rule that applies to one request with ``code`` (counts down ``drop`` rules)."""
        rule = self._rules.get(code)
        if rule is not None and rule.kind == "drop" and rule.count is not None:
            rule.count -= 1
            if rule.count <= 0:
                del self._rules[code]
        return rule
