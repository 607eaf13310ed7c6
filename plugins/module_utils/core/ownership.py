# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ownership markers: the proof that a container is ours.

The marker is written into the container's ``description`` by the clone request itself, so the
VMID claim and the marker appear together. It names the workspace and the controller and carries
an HMAC-SHA256 token over (controller, workspace, vmid) keyed with the controller's secret. A
marker copied onto another VMID, edited, or forged without the secret does not verify. Names,
tags and pool membership are only hints; destruction and adoption need a verifying marker.

The description may hold other text (an operator's note); the marker is one line in it::

    ephemera-workspace: v2 workspace=fix-login controller=c-3f0c... vmid=105 nonce=5e7d... token=9a1b...

Version 2 adds a random ``nonce`` per life of a workspace, recorded in the journal before the clone (the
record's ``facts.marker_nonce``) and signed with the rest. A marker is readable by anyone who can read the
container's config, so without the nonce an old marker (a restored backup of a destroyed workspace, or a
copy pasted onto a new container that got the same VMID) would verify again. A record with a nonce accepts
only a marker with that nonce. Markers of version 1 (no nonce) are still accepted for the records made before
version 2, which hold no nonce.

Version 3 binds a resource by its own id, as the provider names it (a server or instance name, an EC2 client
token or instance id, an Azure set's base name): the clouds' markers. Versions 1 and 2 bind a number: a Proxmox VE
container's VMID, which is its id, and on the clouds, before version 3, a ten-digit digest of the id
(legacy_number). Such a digest can be matched by trying names (about 2^33 of them), and the clouds let whoever may
create a machine choose its name: version 3 leaves nothing to match but the id itself. Markers of version 2 that
clouds' machines carry still verify against the digest of their id::

    ephemera-workspace: v3 workspace=fix-login controller=c-3f0c... id=eph-fix-login-0b1c... nonce=5e7d... token=k3q...

A version 3 token is 128 bits of the HMAC in lower-case base32 (26 letters and digits): with an id of 64 characters
(an EC2 client token) and the longest workspace name, the line fits the 256 characters of an EC2 or Azure tag value.

Every field is checked for its form before anything is computed: the description is written by whoever may
edit the container, and a marker with a non-ASCII token, a Unicode digit in the VMID or a name git cannot use
is FORGED, never an exception.
"""

import base64
import errno
import hashlib
import hmac
import os
import re
import tempfile

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import filetrust
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.durable import fsync_dir
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

PREFIX = 'ephemera-workspace:'
VERSION = 'v2'
# The version that binds a resource's own id (render_resource).
RESOURCE_VERSION = 'v3'
LEGACY = 'v1'
SECRET_ENV = 'EPHEMERA_CONTROLLER_SECRET'
SECRET_BYTES = 32
# A controller_secret given by hand (vault, environment) must be at least this long: a short one can be guessed
# offline from any marker, which anyone who can read a container's config has.
MIN_SECRET_CHARS = 32
NONCE_BYTES = 16
_LINE = re.compile(r'^%s[ \t]+(?P<fields>[^\n]*)$' % re.escape(PREFIX), re.M)
# The form of each field, ASCII only (re.A): anything else is not a marker this code wrote.
_FORMS = {
    'workspace': re.compile(r'^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$', re.A),
    'vmid': re.compile(r'^[1-9][0-9]{0,9}$', re.A),
    'nonce': re.compile(r'^[0-9a-f]{%d}$' % (2 * NONCE_BYTES), re.A),
    'token': re.compile(r'^[0-9a-f]{64}$', re.A),
    'id': re.compile(r'^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$', re.A),
    'token3': re.compile(r'^[a-z2-7]{26}$', re.A),
}
# ``nonce`` of verify(): whatever nonce a genuine marker carries (no record to compare with: orphans, sweeps).
ANY = object()

# Verification outcomes.
VERIFIED = 'verified'          # ours: the token matches this controller, workspace and vmid
ABSENT = 'absent'              # no marker at all: not ours
FOREIGN = 'foreign'            # a marker of another controller
MISMATCH = 'mismatch'          # our controller's marker for another workspace or another vmid
FORGED = 'forged'              # claims our controller but the token does not verify, or a field is malformed
REPLAYED = 'replayed'          # genuine, but of another life of the workspace (its nonce is not the record's)
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


def new_nonce():
    """A fresh nonce for a workspace's marker (recorded in the journal before the clone that writes it)."""
    return os.urandom(NONCE_BYTES).hex()


def valid_nonce(nonce):
    return isinstance(nonce, str) and bool(_FORMS['nonce'].match(nonce))


def record_nonce(record):
    """The marker nonce a journal record holds for its workspace's current life (None: a record made before
    nonces, or one whose clone was never dispatched)."""
    nonce = ((record or {}).get('facts') or {}).get('marker_nonce')
    return nonce if valid_nonce(nonce) else None


def legacy_number(resource):
    """The number a version 2 marker of a cloud bound for the id ``resource`` (a digest of ten digits)."""
    return 1000000000 + int(hashlib.sha256(resource.encode('utf-8')).hexdigest()[:12], 16) % 9000000000


class Bound:
    """What a marker must bind to verify: the resource's own id (``resource``, what a version 3 marker binds) and
    the number a version 1 or 2 marker bound for it (``number``: a container's VMID, or legacy_number of a cloud's
    id, unless the provider says another)."""

    __slots__ = ('resource', 'number')

    def __init__(self, resource, number=None):
        self.resource = str(resource)
        self.number = legacy_number(self.resource) if number is None else int(number)

    @classmethod
    def of(cls, expected):
        """``expected`` as a Bound: a Bound; an int or a string of digits (a VMID: the number, and its digits as the
        id); any other string (a cloud's id, whose version 2 markers bound its legacy_number); None (whatever a
        genuine marker binds)."""
        if expected is None or isinstance(expected, Bound):
            return expected
        if isinstance(expected, int) and not isinstance(expected, bool):
            return cls(str(expected), expected)
        text = str(expected)
        if text.isdigit() and text.isascii():
            return cls(text, int(text))
        return cls(text)

    def __repr__(self):
        return 'Bound(%r, %r)' % (self.resource, self.number)


def resource_token(secret, controller, workspace, resource, nonce):
    """The token of a version 3 marker: 128 bits of the HMAC in lower-case base32 without padding (letters and
    digits alone, which every provider's tags and labels take)."""
    message = '%s\n%s\n%s\n%s\n%s' % (RESOURCE_VERSION, controller, workspace, resource, nonce)
    digest = hmac.new(secret, message.encode('ascii'), hashlib.sha256).digest()[:16]
    return base64.b32encode(digest).decode('ascii').rstrip('=').lower()


def token(secret, controller, workspace, vmid, nonce=None):
    """The HMAC of a marker: version 2 with ``nonce``, version 1 (the old form) without."""
    if nonce is None:
        message = '%s\n%s\n%s\n%d' % (LEGACY, controller, workspace, int(vmid))
    else:
        message = '%s\n%s\n%s\n%d\n%s' % (VERSION, controller, workspace, int(vmid), nonce)
    return hmac.new(secret, message.encode('ascii'), hashlib.sha256).hexdigest()


def render(secret, controller, workspace, vmid, nonce=None):
    """The marker line for a container ``vmid`` of ``workspace``: version 2 with ``nonce`` (the form every new
    container gets), version 1 without (only for tests of the old form)."""
    if nonce is None:
        return '%s %s workspace=%s controller=%s vmid=%d token=%s' % (
            PREFIX, LEGACY, workspace, controller, int(vmid), token(secret, controller, workspace, vmid))
    if not valid_nonce(nonce):
        raise ValueError('a marker nonce is %d hexadecimal digits' % (2 * NONCE_BYTES))
    return '%s %s workspace=%s controller=%s vmid=%d nonce=%s token=%s' % (
        PREFIX, VERSION, workspace, controller, int(vmid), nonce, token(secret, controller, workspace, vmid, nonce))


def render_resource(secret, controller, workspace, resource, nonce):
    """The marker line (version 3) for the resource whose own id is ``resource`` (a cloud's machine), of
    ``workspace``, with ``nonce``."""
    if not valid_nonce(nonce):
        raise ValueError('a marker nonce is %d hexadecimal digits' % (2 * NONCE_BYTES))
    if not isinstance(resource, str) or not _FORMS['id'].match(resource):
        raise ValueError('a marker binds an id of 1 to 128 letters, digits and "._:@/-", not %r' % (resource,))
    return '%s %s workspace=%s controller=%s id=%s nonce=%s token=%s' % (
        PREFIX, RESOURCE_VERSION, workspace, controller, resource, nonce,
        resource_token(secret, controller, workspace, resource, nonce))


def parse(description):
    """The marker's fields from a description, or None when it holds no marker.

    The fields are only what the text says (anyone who may edit the container wrote it): :func:`verify` checks them.
    """
    if not description or not isinstance(description, str):
        return None
    found = _LINE.search(description)
    if not found:
        return None
    parts = found.group('fields').split()
    fields = {'version': parts[0] if parts else ''}
    for part in parts[1:]:
        key, sep, value = part.partition('=')
        if sep and key not in fields:
            fields[key] = value
    return fields


def well_formed(fields):
    """True when every field the marker's version needs is there in the form this code writes (the controller is
    compared with ours before this)."""
    version = fields.get('version')
    if version == RESOURCE_VERSION:
        forms = (('workspace', 'workspace'), ('id', 'id'), ('nonce', 'nonce'), ('token', 'token3'))
    elif version in (VERSION, LEGACY):
        needed = ('workspace', 'vmid', 'token') + (('nonce',) if version == VERSION else ())
        forms = tuple((k, k) for k in needed)
    else:
        return False
    return all(isinstance(fields.get(k), str) and _FORMS[form].match(fields[k]) for k, form in forms)


def verify(description, secret, controller, workspace=None, vmid=None, nonce=ANY):
    """One of VERIFIED, ABSENT, FOREIGN, MISMATCH, FORGED, REPLAYED for the container's description.

    ``workspace``/``vmid`` are what the journal expects (``vmid``: what the description was read from, as
    Bound.of takes it: a container's VMID, a cloud's id, or a Bound); None accepts whatever a genuine marker
    names. A genuine marker on the wrong resource (copied there) or for another workspace is a MISMATCH: not ours
    to touch.

    ``nonce`` is the record's marker nonce: a marker with another nonce (or none) is REPLAYED. None is a record
    made before nonces, which accepts only a version 1 marker; ANY (no record to compare with) accepts both.
    Never raises on what the description holds.
    """
    fields = parse(description)
    if fields is None:
        return ABSENT
    if fields.get('controller') != controller:
        return FOREIGN
    if not well_formed(fields):
        return FORGED
    name = fields['workspace']
    bound = Bound.of(vmid)
    if fields['version'] == RESOURCE_VERSION:
        marked = fields['id']
        marked_nonce = fields['nonce']
        expected = resource_token(secret, controller, name, marked, marked_nonce)
        elsewhere = bound is not None and marked != bound.resource
    else:
        marked = int(fields['vmid'])
        marked_nonce = fields.get('nonce') if fields['version'] == VERSION else None
        expected = token(secret, controller, name, marked, marked_nonce)
        elsewhere = bound is not None and marked != bound.number
    # The token must match the marker's own fields; only then do the fields mean anything.
    if not hmac.compare_digest(expected.encode('ascii'), fields['token'].encode('ascii')):
        return FORGED
    if (workspace is not None and name != workspace) or elsewhere:
        return MISMATCH
    if nonce is not ANY and marked_nonce != nonce:
        return REPLAYED
    return VERIFIED


def verdict(description, secret, controller, workspace=None, vmid=None, nonce=ANY):
    """:func:`verify` with the secret; without it (None) only what the marker says: ABSENT, FOREIGN (when the
    controller id is known) or UNVERIFIED."""
    if secret is not None:
        return verify(description, secret, controller, workspace, vmid, nonce)
    fields = parse(description)
    if fields is None:
        return ABSENT
    if controller is not None and fields.get('controller') != controller:
        return FOREIGN
    return UNVERIFIED


def secret_path(journal_path):
    """Where the controller secret lives: next to the journal."""
    return os.path.join(os.path.dirname(journal_path), os.path.basename(journal_path) + '.secret')


def _given_secret(value, where):
    value = value.encode('utf-8') if not isinstance(value, bytes) else value
    if len(value) < MIN_SECRET_CHARS:
        raise MarkerError('The controller secret from %s is %d characters long; it must have at least %d (anyone who '
                          'can read a container\'s config sees a marker signed with it, and a short secret can be '
                          'guessed from one). Make one with "openssl rand -hex 32" and keep it in the vault; note '
                          'that the markers of existing workspaces were signed with the old one.'
                          % (where, len(value), MIN_SECRET_CHARS))
    return value


def _read_secret_file(path):
    """The secret the file holds (b'' when it does not exist), refused when it is not the controller user's own."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_NOCTTY', 0))
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return b''
        if exc.errno == errno.ELOOP:
            raise MarkerError('The controller secret %s is a symbolic link; it must be a file of its own (0600, owned '
                              'by the user running Ansible).' % path, path=path)
        raise MarkerError('Cannot read the controller secret %s: %s. Fix its permissions (0600, owned by the '
                          'user running Ansible) or give controller_secret from a vault.' % (path, exc), path=path)
    with os.fdopen(fd, 'rb') as f:
        found = filetrust.problems(os.fstat(f.fileno()), owner=True, private=True)
        if found:
            raise MarkerError(filetrust.refusal(path, 'The controller secret', found,
                                                'make it yours with mode 0600 (chown; chmod 600 %s)' % path), path=path)
        return f.read(4096).strip()


def load_secret(journal_path, given=None):
    """The controller secret: ``given`` (e.g. from a vault variable) or the file next to the journal.

    The file is made once, with 0600 permissions, on first use. A secret that is lost makes every
    marker unverifiable, which is safe (nothing is destroyed) but needs an operator: keep a copy in
    the vault or back the file up with the journal. A given secret shorter than MIN_SECRET_CHARS is refused, and
    so is a file another user owns or that others may read or write.
    """
    if given:
        return _given_secret(given, 'controller_secret')
    if os.environ.get(SECRET_ENV):
        return _given_secret(os.environ[SECRET_ENV], SECRET_ENV)
    path = secret_path(journal_path)
    data = _read_secret_file(path)
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
    return _read_secret_file(path)
