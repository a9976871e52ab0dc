"""Helpers shared by the test suites: wire captures, stored-message encoder, broker admin calls,
the frame proxy, the orderly service stand-in and a socket frame server."""
