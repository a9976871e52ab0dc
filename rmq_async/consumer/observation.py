"""``Observation``: the message trace and OpenTelemetry of one consumer, apart from its context.

What watches the handler calls (:class:`~.observe.HandlerObserver` s: the trace's
:class:`~rmq_async.observability.trace.hooks.ConsumeTracer`, OpenTelemetry's
:class:`~rmq_async.observability.otel.ConsumeObserver`), the wrapped handlers the services call, the
pull side's observer, and where the trace dispatcher runs. Made once by the consumer's context (the
observers and their counts outlive a run); each run tells it, through :meth:`start_run`, how to spawn
the trace dispatcher in the run's task group and where its inner trace producers come from.
Without a trace and without an OpenTelemetry provider, it holds nothing and costs nothing: the
services call the handler itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..config import ClientConfig
from ..errors import ClientError
from ..observability.otel import ConsumeObserver, telemetry
from ..observability.trace.dispatcher import TraceDispatcher, TraceSender
from ..observability.trace.hooks import ConsumeTracer
from ..protocol.stored import MessageExt
from .observe import HandlerObserver, observed, observed_plain
from .types import ConsumeResult

__all__ = ["Observation", "Spawn"]

#: start ``fn(*args)`` in the run's task group; False when there is none (outside a run)
Spawn = Callable[..., bool]


class _ConsumerSide(Protocol):
    """What OpenTelemetry's gauges read of the consumer (its context)."""

    @property
    def stats(self) -> Any: ...
    @property
    def has_offset_store(self) -> bool: ...
    @property
    def offset_store(self) -> Any: ...


class Observation:
    """See the module docstring. ``consume_timeout``: when the trace labels a call TIME_OUT."""

    def __init__(self, group: str, client_config: ClientConfig, consume_timeout: float) -> None:
        self.group = group
        self._client_config = client_config
        self._consume_timeout = consume_timeout
        #: what watches handler calls: empty (the default), the services call the handler itself
        self.observers: list[HandlerObserver] = []
        self._observed: dict[tuple[object, float | None, bool], Any] = {}
        #: message trace (``ClientConfig.trace``): a SubBefore/SubAfter per handler call
        self.tracer: ConsumeTracer | None = None
        #: OpenTelemetry metrics and spans: set by :meth:`start_run` when the application has set a
        #: provider (fed by the pull loop and as an observer); None: nothing recorded, no cost
        self.observer: ConsumeObserver | None = None
        self._spawn: Spawn | None = None
        self._senders: Callable[[str], TraceSender] | None = None
        self._trace_running = False
        if client_config.trace.enabled:
            dispatcher = TraceDispatcher(group, "CONSUME", client_config.trace)
            self.tracer = ConsumeTracer(dispatcher, group, consume_timeout)
            self.observers.append(self.tracer)

    def start_run(
        self,
        spawn: Spawn,
        senders: Callable[[str], TraceSender] | None,
        client_id: str,
        side: _ConsumerSide,
    ) -> None:
        """A run begins: the trace dispatcher will run through ``spawn`` (with the first observed
        call) and send with ``senders``; OpenTelemetry starts observing, once, if a provider is set."""
        self._spawn, self._senders, self._trace_running = spawn, senders, False
        if self.observer is None:
            tel = telemetry()
            if tel is not None:
                self.observer = ConsumeObserver(
                    tel,
                    self.group,
                    client_id,
                    side,
                    self._client_config.otel,
                    max_age=self._consume_timeout,
                )
                self.observers.append(self.observer)
                self._observed.clear()

    def observed(self, handler: Any, trace_timeout: float | None = None, *, plain: bool = False) -> Any:
        """``handler`` as the services call it: itself without observers, else wrapped by them
        (:func:`.observe.observed`, made once per handler). A service asks once per batch it takes.
        ``trace_timeout``: the seconds after which the trace labels a call TIME_OUT, when it is not
        the consume timeout (POP: the invisible time, as Java's POP service). ``plain``: ``handler``
        is a plain function and so is the wrapper (:func:`.observe.observed_plain`)."""
        if not self.observers:
            return handler
        self._start_trace()
        key = (handler, trace_timeout, plain)
        wrapped = self._observed.get(key)
        if wrapped is None:
            observers = self.observers
            tracer = self.tracer
            if trace_timeout is not None and tracer is not None:
                other = ConsumeTracer(tracer.dispatcher, self.group, trace_timeout)
                observers = [other if o is tracer else o for o in observers]
            wrap = observed_plain if plain else observed
            wrapped = self._observed[key] = wrap(handler, observers)
        return wrapped

    def _start_trace(self) -> None:
        tracer = self.tracer
        if tracer is not None and not self._trace_running and self._spawn is not None:
            # the trace dispatcher runs in this run's task group, from the first observed call on
            self._trace_running = self._spawn(tracer.dispatcher.run, self._trace_sender)

    def _trace_sender(self, group: str) -> TraceSender:
        if self._senders is None:
            raise ClientError("consumer is not started")
        return self._senders(group)

    def before(self, batch: list[MessageExt]) -> tuple[tuple[HandlerObserver, object], ...] | None:
        """A delivery handed out (``deliveries()``): what watches handler calls sees it as a call's
        start; None without observers. Hand the result to :meth:`after` when it is settled."""
        if not self.observers:
            return None
        self._start_trace()
        return tuple((o, o.before(batch)) for o in self.observers)

    @staticmethod
    def after(
        tokens: tuple[tuple[HandlerObserver, object], ...],
        batch: list[MessageExt],
        result: object,
        error: BaseException | None = None,
    ) -> None:
        for o, token in tokens:
            o.after(token, batch, result, error)

    def polled(self, batch: list[MessageExt]) -> None:
        """A lite-pull ``poll`` returns ``batch`` (not empty): as Java's ``DefaultLitePullConsumerImpl``,
        the trace writes a SubBefore and at once a SubAfter (CONSUME_SUCCESS); OpenTelemetry counts it,
        records the await times of its watched messages and a ``receive`` span."""
        tracer = self.tracer
        if tracer is not None:
            self._start_trace()
            tracer.after(tracer.before(batch), batch, ConsumeResult.SUCCESS, None)
        if self.observer is not None:
            self.observer.polled(batch)
