"""Scripted local stand-ins of the model endpoints the coding agents talk to (tests/models/server.py)."""

from .server import NOTES, ModelServer, StubError  # noqa: F401
