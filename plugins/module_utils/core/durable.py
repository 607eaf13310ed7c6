# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Durable writes for files that live outside the journal (archives, exported state, secrets).

A reader sees either the old file or the complete new one, never a half-written file, and once
the call returns the new content survives a power cut: write a temporary file in the same
directory, fsync it, rename it over the target, then fsync the directory so the rename itself
is on disk. Temporary names start with ``.`` and end with ``.tmp`` so readers can skip them.
"""

import contextlib
import os
import tempfile


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def durable_writer(path, mode=0o600):
    """A file object to write ``path`` through, with :func:`write_durable`'s guarantees, for data that arrives in parts.

    The new content replaces ``path`` only when the ``with`` block ends without an error.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', suffix='.tmp', dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, 'wb') as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def write_durable(path, data, mode=0o600):
    """Write ``data`` (bytes or str) to ``path`` atomically and durably with permissions ``mode``."""
    if not isinstance(data, bytes):
        data = data.encode('utf-8')
    with durable_writer(path, mode) as out:
        out.write(data)
    return path
