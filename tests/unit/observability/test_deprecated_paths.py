"""The message trace's old path, ``rmq_async.trace`` (the README named ``rmq_async.trace.query_trace``),
still imports: the same objects as ``rmq_async.observability.trace``, with one DeprecationWarning on
import, attributed to the importing line (so a user sees where, and the suite's filters judge it as
ours)."""

from __future__ import annotations

import sys
import warnings

import pytest

import rmq_async.observability.trace as new


def test_the_old_trace_path_warns_once_on_import_at_the_importer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "rmq_async.trace", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import rmq_async.trace  # noqa: F401
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert "rmq_async.observability.trace" in str(caught[0].message)
    assert caught[0].filename == __file__


def test_the_old_trace_path_reexports_every_name_of_the_new_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import rmq_async.trace as old
    assert old.__all__ == new.__all__
    for name in new.__all__:
        assert getattr(old, name) is getattr(new, name), name


def test_the_old_otel_path_warns_on_import_and_reexports_the_new_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rmq_async.observability.otel as new_otel

    monkeypatch.delitem(sys.modules, "rmq_async.otel", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import rmq_async.otel as old_otel
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert "rmq_async.observability.otel" in str(caught[0].message) and caught[0].filename == __file__
    assert old_otel.__all__ == new_otel.__all__
    for name in new_otel.__all__:
        assert getattr(old_otel, name) is getattr(new_otel, name), name
