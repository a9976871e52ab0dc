"""Observability: what a client tells about its messages outside the messages themselves.

:mod:`.trace` writes the message trace as the Java client does (records on the trace topic, read by
the dashboard and ``mqadmin queryMsgTraceById``); :mod:`.otel` records OpenTelemetry metrics and
spans when the application set a provider. Nothing is imported here: a producer that traces nothing
does not load the OpenTelemetry support, and neither part loads the other.
"""
