"""The budget of a histogram or of root spans: at most so many picks a second, uniform in time, at a
decrement and a comparison per unpicked call (the SDK's ``Histogram.record`` and a span cost more than
the whole consume path of a message, so most calls must be skipped, and skipping must be cheap)."""

from __future__ import annotations

import math
import random
import time

__all__ = ["WINDOW", "Sampler"]

#: seconds: a sampler's budget window (a tenth of the rate per tenth of a second, so that a budget is
#: spread over the second even before the rate is known, e.g. in the first one; 1 s below 100/s)
WINDOW = 0.1


class Sampler:
    """Picks at most ``rate`` calls a second (None: every call), uniformly in time.

    The caller counts down: ``s.countdown -= 1`` and, when it reaches 0, asks :meth:`fire` whether
    this call is picked (:meth:`picks` does it for a batch). :meth:`fire` re-arms the countdown with a
    stride drawn around ``k`` (uniform in 1..2k-1, so no position in a periodic pattern, e.g. the
    first message of each pulled batch, is favoured), where ``k`` is the last window's calls divided by
    the budget; within a window (a tenth of a second: ``rate / 10`` picks; one second below 100/s) at
    most its share of ``rate`` fires are picked. The clock is read only when the
    budget of the window is spent (then ``k`` doubles while the window lasts, so the reads stay rare)
    and by :meth:`tick`, which a caller with a clock at hand (the pull loop, once per pulled batch)
    calls to start the next window on time: an unpicked call costs a decrement and a comparison.
    """

    __slots__ = ("armed", "cap", "countdown", "left", "seen", "stride", "t0", "t_end", "window")

    def __init__(self, rate: int | None) -> None:
        self.window = WINDOW if rate is not None and rate >= 100 else 1.0
        #: picks per window; None: every call
        self.cap = None if rate is None else int(rate * self.window)
        self.stride = 1
        self.countdown = self.armed = 1
        self.seen = 0  # calls of this window counted at the re-arms
        self.t0 = time.monotonic()
        self.t_end = self.t0 + self.window
        self.left = (1 << 62) if self.cap is None else self.cap

    def _arm(self) -> None:
        k = self.stride
        self.seen += self.armed
        self.countdown = self.armed = k if k == 1 else 1 + int(random.random() * (2 * k - 1))

    def fire(self) -> bool:
        """The countdown reached 0: is this call picked? (re-arms the countdown)"""
        self._arm()
        if self.left > 0:
            self.left -= 1
            return True
        if self.cap is None:
            return True
        now = time.monotonic()
        if now >= self.t_end:
            self._next_window(now)
            if self.left > 0:
                self.left -= 1
                return True
            return False
        self.stride *= 2  # over budget: fire (and read the clock) less often until the window ends
        return False

    def tick(self, now: float) -> None:
        """A clock reading: start the next window if this one is over (a rate that fell is seen)."""
        if now >= self.t_end and self.cap is not None:
            self._next_window(now)

    def _next_window(self, now: float) -> None:
        assert self.cap is not None
        calls = self.seen + self.armed - self.countdown
        elapsed = now - self.t0
        if self.cap == 0:
            self.stride = 1 << 30
        elif elapsed > 0:
            self.stride = max(1, math.ceil(calls * self.window / elapsed / self.cap))
        self.t0, self.t_end = now, now + self.window
        self.left = self.cap
        self.seen = 0
        self.armed = 0
        self._arm()

    def picks(self, n: int) -> list[int]:
        """The picked ones of ``n`` calls at once (their indices)."""
        cd = self.countdown
        if cd > n:
            self.countdown = cd - n
            return []
        out: list[int] = []
        i = cd - 1
        while True:
            self.countdown = 0
            if self.fire():
                out.append(i)
            nxt = i + self.countdown
            if nxt >= n:
                self.countdown -= n - 1 - i
                return out
            i = nxt
