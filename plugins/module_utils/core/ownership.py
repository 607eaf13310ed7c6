# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ownership markers: the proof that a container is ours.

The marker is written into the container's ``description`` by the clone request itself, so the
VMID claim and the marker appear together. It names the workspace and the controller and carries
an HMAC-SHA256 token over (controller, workspace, vmid) keyed with the controller's secret. A
marker copied onto another VMID, edited, or forged without the secret does not verify. Names,
tags and pool membership are only hints; destruction and adoption need a verifying marker.

The description may hold other text (an operator's note); the marker is one line in it::

    ephemera-workspace: v1 workspace=fix-login controller=3f0c... vmid=105 token=9a1b...
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import hashlib
import hmac
import os
import re
import tempfile

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.durable import fsync_dir
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

PREFIX = 'ephemera-workspace:'
VERSION = 'v1'
SECRET_ENV = 'EPHEMERA_CONTROLLER_SECRET'
SECRET_BYTES = 32
_LINE = re.compile(r'^%s\s+(?P<fields>.*)$' % re.escape(PREFIX), re.M)

# Verification outcomes.
VERIFIED = 'verified'          # ours: the token matches this controller, workspace and vmid
ABSENT = 'absent'              # no marker at all: not ours
FOREIGN = 'foreign'            # a marker of another controller
MISMATCH = 'mismatch'          # our controller's marker for another workspace or another vmid
FORGED = 'forged'              # claims our controller but the token does not verify
UNVERIFIED = 'unverified'      # without the secret: ours by its words, the token unchecked


class MarkerError(EphemeraError):
    """The controller secret cannot be read or made."""


def controller_id(secret):
    """The controller's identity in markers, derived from its secret.

    It is not kept in the journal, so a lost or restored journal still recognises the containers
    this controller made (as orphans to report, or records to adopt again): whoever holds the
    secret is the controller.
    """
    return 'c-' + hmac.new(secret, b'ephemera controller id', hashlib.sha256).hexdigest()[:24]


def token(secret, controller, workspace, vmid):
    message = ('%s\n%s\n%s\n%d' % (VERSION, controller, workspace, int(vmid))).encode('utf-8')
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def render(secret, controller, workspace, vmid):
    """The marker line for a container ``vmid`` of ``workspace``."""
    return '%s %s workspace=%s controller=%s vmid=%d token=%s' % (
        PREFIX, VERSION, workspace, controller, int(vmid), token(secret, controller, workspace, vmid))


def parse(description):
    """The marker's fields from a description, or None when it holds no marker."""
    if not description:
        return None
    found = _LINE.search(description)
    if not found:
        return None
    parts = found.group('fields').split()
    fields = {'version': parts[0] if parts else ''}
    for part in parts[1:]:
        key, sep, value = part.partition('=')
        if sep:
            fields[key] = value
    return fields


def verify(description, secret, controller, workspace=None, vmid=None):
    """One of VERIFIED, ABSENT, FOREIGN, MISMATCH, FORGED for the container's description.

    ``workspace``/``vmid`` are what the journal expects (``vmid``: the container the description
    was read from); None accepts whatever a genuine marker names. A genuine marker on the wrong
    container (copied there) or for another workspace is a MISMATCH: not ours to touch.
    """
    fields = parse(description)
    if fields is None:
        return ABSENT
    if fields.get('controller') != controller:
        return FOREIGN
    try:
        marked_vmid = int(fields.get('vmid', ''))
    except ValueError:
        return FORGED
    name = fields.get('workspace', '')
    # The token must match the marker's own fields; only then do the fields mean anything.
    expected = token(secret, controller, name, marked_vmid)
    if fields.get('version') != VERSION or not hmac.compare_digest(expected, fields.get('token', '')):
        return FORGED
    if (workspace is not None and name != workspace) or (vmid is not None and marked_vmid != int(vmid)):
        return MISMATCH
    return VERIFIED


def verdict(description, secret, controller, workspace=None, vmid=None):
    """:func:`verify` with the secret; without it (None) only what the marker says: ABSENT, FOREIGN (when the
    controller id is known) or UNVERIFIED."""
    if secret is not None:
        return verify(description, secret, controller, workspace, vmid)
    fields = parse(description)
    if fields is None:
        return ABSENT
    if controller is not None and fields.get('controller') != controller:
        return FOREIGN
    return UNVERIFIED


def secret_path(journal_path):
    """Where the controller secret lives: next to the journal."""
    return os.path.join(os.path.dirname(journal_path), os.path.basename(journal_path) + '.secret')


def load_secret(journal_path, given=None):
    """The controller secret: ``given`` (e.g. from a vault variable) or the file next to the journal.

    The file is made once, with 0600 permissions, on first use. A secret that is lost makes every
    marker unverifiable, which is safe (nothing is destroyed) but needs an operator: keep a copy in
    the vault or back the file up with the journal.
    """
    if given:
        return given.encode('utf-8') if not isinstance(given, bytes) else given
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV].encode('utf-8')
    path = secret_path(journal_path)
    try:
        with open(path, 'rb') as f:
            data = f.read().strip()
    except (IOError, OSError) as exc:
        if exc.errno != errno.ENOENT:
            raise MarkerError('Cannot read the controller secret %s: %s. Fix its permissions (0600, owned by the '
                              'user running Ansible) or give controller_secret from a vault.' % (path, exc), path=path)
        data = b''
    if data:
        return data
    # Made beside the target and linked into place: link() fails if another fork got there first,
    # so every fork ends up with the one secret on disk and nobody ever reads a half-written file.
    directory = os.path.dirname(path) or '.'
    try:
        fd, tmp = tempfile.mkstemp(prefix='.controller-secret.', suffix='.tmp', dir=directory)
    except OSError as exc:
        raise MarkerError('Cannot create the controller secret in %s: %s.' % (directory, exc.strerror), path=path)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, os.urandom(SECRET_BYTES).hex().encode('ascii'))
        os.fsync(fd)
        os.close(fd)
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise MarkerError('Cannot create the controller secret %s: %s.' % (path, exc.strerror), path=path)
    finally:
        os.unlink(tmp)
    fsync_dir(directory)
    with open(path, 'rb') as f:
        return f.read().strip()
