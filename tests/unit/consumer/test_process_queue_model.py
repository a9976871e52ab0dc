"""ProcessQueue against a plain model (hypothesis state machine): pulled runs, removals of whole runs,
of arbitrary subsets and of unknown messages, orderly take / commit / put_back, odd puts (overlapping,
descending, duplicated offsets). After every step: count, bytes, span, committable offset and the
cached messages in order agree with the model."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rmq_async.consumer.process_queue import ProcessQueue
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.stored import MessageExt


def _msg(off: int, size: int) -> MessageExt:
    return MessageExt("T", b"x" * size, queue_offset=off)


class ProcessQueueModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pq = ProcessQueue(MessageQueue("T", "b", 0), max_count=10**9, max_bytes=10**12, max_span=None)
        self.held: dict[int, MessageExt] = {}  # cached, not consuming
        self.consuming: dict[int, MessageExt] = {}
        self.runs: list[list[MessageExt]] = []  # the pulled batches, as put
        self.next = 0
        self.top_seen = -1

    # -- puts -----------------------------------------------------------------------------------

    @rule(
        n=st.integers(1, 12),
        gaps=st.lists(st.integers(0, 3), min_size=12, max_size=12),
        size=st.integers(0, 40),
    )
    def pull(self, n: int, gaps: list[int], size: int) -> None:
        msgs = []
        for i in range(n):
            self.next += gaps[i]
            msgs.append(_msg(self.next, size + i))
            self.next += 1
        self._put(msgs)

    @rule(data=st.data(), size=st.integers(0, 9))
    def odd_put(self, data: st.DataObject, size: int) -> None:
        # offsets anywhere (overlapping what is held, descending, repeated): never from a real pull
        near = st.integers(0, self.next + 3) | st.sampled_from(sorted({*self.held, *self.consuming, 0}))
        offs = data.draw(st.lists(near, min_size=1, max_size=8))
        self._put([_msg(o, size) for o in offs])

    def _put(self, msgs: list[MessageExt]) -> None:
        fresh: dict[int, MessageExt] = {}
        for m in msgs:
            off = m.queue_offset
            if off not in self.held and off not in self.consuming and off not in fresh:
                fresh[off] = m
        assert self.pq.put(msgs) == len(fresh)
        self.held.update(fresh)
        if fresh:
            self.top_seen = max(self.top_seen, *fresh)
            self.runs.append(list(fresh.values()))
        self.next = max(self.next, self.top_seen + 1)

    # -- removals ---------------------------------------------------------------------------------

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def remove_whole_run(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(self.runs))
        self._remove(run)

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def remove_rest_of_a_run(self, data: st.DataObject) -> None:
        # after part of a run was finished, the rest of it (the fast path of a whole run again)
        run = data.draw(st.sampled_from(self.runs))
        self._remove([m for m in run if self.held.get(m.queue_offset) is m])

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def remove_subset(self, data: st.DataObject) -> None:
        offs = data.draw(st.lists(st.sampled_from(sorted(self.held)), max_size=10, unique=True))
        extra = data.draw(st.lists(st.integers(0, 80).map(lambda o: _msg(o, 3)), max_size=2))
        self._remove([self.held[o] for o in sorted(offs)] + extra)

    def _remove(self, msgs: list[MessageExt]) -> None:
        was_empty = not self.held
        for m in msgs:  # by offset, as the process queue does
            self.held.pop(m.queue_offset, None)
        got = self.pq.remove(msgs)
        assert got == (-1 if was_empty else self._committable())

    # -- orderly ----------------------------------------------------------------------------------

    @precondition(lambda self: not self.consuming)
    @rule(n=st.integers(1, 6))
    def take(self, n: int) -> None:
        expect = [self.held[o] for o in sorted(self.held)[:n]]
        assert self.pq.take(n) == expect
        for m in expect:
            self.consuming[m.queue_offset] = self.held.pop(m.queue_offset)

    @precondition(lambda self: self.consuming)
    @rule()
    def commit(self) -> None:
        last = max(self.consuming)
        assert self.pq.commit() == last + 1
        self.consuming.clear()

    @precondition(lambda self: self.consuming)
    @rule(data=st.data())
    def put_back(self, data: st.DataObject) -> None:
        offs = data.draw(st.lists(st.sampled_from(sorted(self.consuming)), min_size=1, unique=True))
        back = [self.consuming[o] for o in offs]
        self.pq.put_back(back)
        for o in offs:
            self.held[o] = self.consuming.pop(o)

    # -- invariants -------------------------------------------------------------------------------

    def _committable(self) -> int:
        if self.held:
            return min(self.held)
        if self.consuming:
            return min(self.consuming)
        return self.top_seen + 1

    @invariant()
    def agrees(self) -> None:
        pq = self.pq
        assert pq.count == len(self.held) + len(self.consuming)
        assert pq.msg_bytes == sum(len(m.body) for m in [*self.held.values(), *self.consuming.values()])
        assert [m.queue_offset for m in pq.messages()] == sorted(self.held)
        assert all(m is self.held[m.queue_offset] for m in pq.messages())
        assert pq.span == (max(self.held) - min(self.held) if self.held else 0)
        assert pq.committable_offset() == self._committable()
        assert pq.consuming_messages() == [self.consuming[o] for o in sorted(self.consuming)]


ProcessQueueModel.TestCase.settings = settings(max_examples=120, stateful_step_count=30, deadline=None)
test_process_queue_model = ProcessQueueModel.TestCase
