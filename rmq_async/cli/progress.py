"""A live progress line on stderr (rich) for the CLI and the benchmark harness."""

from __future__ import annotations

from typing import Any

__all__ = ["ProgressLine"]


class ProgressLine:
    """A progress line on stderr when ``enabled`` (a terminal, not ``--quiet``); nothing otherwise.
    ``total`` None: no end known (a count and a rate); else a bar, the count and the time left."""

    def __init__(self, total: int | None, label: str, *, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            if total is None:
                self._bar = Progress(transient=True)
            else:
                columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
                self._bar = Progress(*columns, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
