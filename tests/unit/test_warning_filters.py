"""The suite's warning filters (pyproject ``filterwarnings``): every warning is an error, except the
deprecation and future warnings that third-party modules raise (pyspark 4.3 warns on import with
pandas >= 3; as an error it failed that import half-way, and every later Spark test of the process
with it). A deprecation attributed to the package's own modules, or to a test, is still an error."""

from __future__ import annotations

import warnings

import pytest


def _warn(category: type[Warning], module: str) -> None:
    warnings.warn_explicit("a notice", category, filename=f"{module}.py", lineno=1, module=module)


@pytest.mark.parametrize("category", [DeprecationWarning, PendingDeprecationWarning, FutureWarning])
@pytest.mark.parametrize("module", ["pyspark.sql.connect.utils", "pandas", "google.protobuf.internal"])
def test_third_party_deprecation_and_future_warnings_are_not_errors(
    category: type[Warning], module: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", append=True)  # behind the configured filters
        _warn(category, module)
    assert caught == []  # ignored by the configured filter, not raised


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning])
@pytest.mark.parametrize("module", ["rmq_async.consumer.push", "test_warning_filters", "embedded.test_x"])
def test_our_own_deprecation_and_future_warnings_are_errors(category: type[Warning], module: str) -> None:
    with pytest.raises(category):
        _warn(category, module)


@pytest.mark.parametrize("category", [RuntimeWarning, UserWarning, ResourceWarning])
def test_other_third_party_warnings_are_errors(category: type[Warning]) -> None:
    with pytest.raises(category):
        _warn(category, "pyspark.sql.session")
