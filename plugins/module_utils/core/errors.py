# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's error types: every failure a module reports is one of these.

Each error carries a message that says what went wrong, on which thing, and what to do next.
Modules turn them into ``fail_json(msg=str(err), **err.details)``.
"""


class EphemeraError(Exception):
    """Base class. ``details`` is a JSON-able dict that modules add to their failure result."""

    def __init__(self, message, **details):
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self):
        return self.message


class JournalError(EphemeraError):
    """The journal cannot be opened, read or written (path, permissions, corruption, schema)."""


class JournalMissing(JournalError):
    """No journal exists at the path and the caller asked not to create one."""


class StaleGenerationError(JournalError):
    """A compare-and-set lost: the record changed since the caller read it. Nothing was written."""


class IdempotencyError(EphemeraError):
    """An idempotency key was reused with another request, or its first use is still running."""


class ClaimLostError(StaleGenerationError):
    """A write made for a queued operation whose claim is no longer held (taken over, cancelled, finished).

    Nothing was written. The run that gets it must stop working on the operation: another run owns it now.
    """


class QueueError(EphemeraError):
    """An operation cannot be queued, waited for or changed (unknown kind or target, cancelled parent, ...)."""


class QueueTimeout(QueueError):
    """A run waited longer than its timeout for its turn or for the result of the operation it joined."""
