# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The expiry guard of a GCP workspace: a standalone script (the Python standard library only) that runs inside the
instance from a systemd timer and deletes the instance when its own labels say it clearly expired.

A machine can outlive the controller that made it. Every tick the guard:

1. reads its identity (project, zone, instance name) and an access token of its service account from the metadata
   server;
2. reads its own labels with ``instances.get`` (the metadata server does not serve an instance's labels);
3. decides by the label cleanup sweep's table (``decide``: the rules of core.lease.cleanup_decision, copied here
   because the guest has no collection to import; a unit test checks both on the same table of cases): nothing
   unless the instance carries the ``ephemera`` label and not ``keep=true``; ``failed``/``released``/``expired``
   delete; ``running``/``provisioning`` only 12 hours past ``expires_at``; ``ready``/``active`` (and no state) past
   ``expires_at``;
4. logs its decision to its standard output (the journal of the guest, through systemd; ``--log`` appends to a file
   as well, for a guest without journald) and to the serial console;
5. deletes its own instance when the decision says so. A failed self-delete is logged loudly (``GUARD FAILED``) and
   the run exits 1: the timer runs it again on the next tick.

``check`` asks ``instances.testIamPermissions`` whether the service account may delete the instance (exit 0 yes,
3 no), for the create to refuse or warn before it relies on the guard.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import datetime
import json
import os
import re
import sys
import time

try:
    from urllib.request import Request, build_opener
    from urllib.error import HTTPError, URLError
except ImportError:  # pragma: no cover (Python 2 has no place in a guest of ours)
    Request = build_opener = HTTPError = URLError = None


def fetch(request, timeout):
    """Send ``request`` (HTTP errors raise HTTPError), as the standard library's default opener does."""
    return build_opener().open(request, timeout=timeout)


DELETE = 'delete'
SKIP = 'skip'
STALE_AFTER = 12 * 3600
STARTING_STATES = ('running', 'provisioning')
FINISHED_STATES = ('failed', 'released', 'expired')
LEASE_LABELS = ('state', 'expires_at', 'keep', 'created_at')
OURS = 'ephemera'
PERMISSION = 'compute.instances.delete'
DEFAULT_METADATA = 'http://metadata.google.internal'
DEFAULT_API = 'https://compute.googleapis.com'
INSTALL_PATH = '/usr/local/sbin/ephemera-gcp-guard'
UNIT_NAME = 'ephemera-gcp-guard'

TIMER_UNIT = """[Unit]
Description=Ephemera expiry guard: delete this instance when its lease labels say it expired

[Timer]
OnBootSec=2min
OnUnitActiveSec=2min
RandomizedDelaySec=30s
Persistent=true
Unit=ephemera-gcp-guard.service

[Install]
WantedBy=timers.target
"""

SERVICE_UNIT = """[Unit]
Description=Ephemera expiry guard (one run)
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /usr/local/sbin/ephemera-gcp-guard run
StandardOutput=journal+console
StandardError=journal+console
"""

_UNIX = re.compile(r'^[0-9]+(\.[0-9]+)?$')
_RFC3339 = re.compile(r'^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?'
                      r'([Zz]|[+-][0-9]{2}:[0-9]{2})$')


def _text(labels, key):
    value = labels.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        value = 'true' if value else 'false'
    text = str(value).strip()
    if not text or text.lower() == 'unknown':
        return None
    return text


def parse_time(text):
    """Unix seconds from unix seconds or RFC 3339 with an offset; None when it parses as neither."""
    value = str(text).strip()
    if _UNIX.match(value):
        return float(value)
    m = _RFC3339.match(value)
    if not m:
        return None
    try:
        moment = datetime.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                   int(m.group(5)), min(int(m.group(6)), 59))
    except ValueError:
        return None
    if int(m.group(6)) > 60:
        return None
    seconds = (moment - datetime.datetime(1970, 1, 1)).total_seconds() + (1 if int(m.group(6)) == 60 else 0)
    seconds += float(m.group(7) or 0)
    offset = m.group(8)
    if offset not in ('Z', 'z'):
        sign = 1 if offset[0] == '+' else -1
        seconds -= sign * (int(offset[1:3]) * 3600 + int(offset[4:6]) * 60)
    return seconds


def decide(labels, now):
    """(DELETE or SKIP, reason) for an instance with ``labels`` at ``now``: the label sweep's table, for an instance
    that carries the ``ephemera`` label (anything else is not ours: SKIP)."""
    labels = labels or {}
    if OURS not in labels:
        return SKIP, 'no %s label: not a workspace of ours' % OURS
    if not any(_text(labels, key) is not None for key in LEASE_LABELS):
        return SKIP, 'no lease labels: not a workspace the label sweep manages'
    keep = labels.get('keep')
    keep = ('true' if keep else 'false') if isinstance(keep, bool) else str('' if keep is None else keep).strip()
    if keep.lower() == 'true':
        return SKIP, 'keep=true: held by a person'
    if keep and keep.lower() != 'false':
        return SKIP, 'keep=%s is neither true nor false: left alone, as if kept' % keep
    raw = _text(labels, 'expires_at')
    expires_at = None
    if raw is not None:
        expires_at = parse_time(raw)
        if expires_at is None:
            return SKIP, 'expires_at=%s parses as neither unix seconds nor RFC 3339' % raw
    state = (_text(labels, 'state') or '').lower()
    shown = state or 'missing'
    if state in FINISHED_STATES:
        return DELETE, 'state %s: finished' % state
    if expires_at is None:
        return SKIP, 'state %s and no expires_at: nothing says it expired' % shown
    if state in STARTING_STATES:
        if now > expires_at + STALE_AFTER:
            return DELETE, 'state %s and stale: expires_at %s is more than 12 hours past' % (state, raw)
        return SKIP, 'state %s: not stale until 12 hours past expires_at %s' % (state, raw)
    if now > expires_at:
        return DELETE, 'state %s: expires_at %s has passed' % (shown, raw)
    return SKIP, 'state %s: expires_at %s has not passed' % (shown, raw)


# ------------------------------------------------------------------------------- the guest

class Guest:
    """The instance the guard runs in: its metadata server and the Compute Engine API."""

    def __init__(self, metadata, api, timeout=10):
        self.metadata = metadata.rstrip('/')
        self.api = api.rstrip('/')
        self.timeout = timeout
        self._token = None

    def meta(self, key):
        request = Request('%s/computeMetadata/v1/%s' % (self.metadata, key), headers={'Metadata-Flavor': 'Google'})
        return fetch(request, timeout=self.timeout).read().decode('utf-8')

    def identity(self):
        zone = self.meta('instance/zone').rsplit('/', 1)[-1]
        return self.meta('project/project-id'), zone, self.meta('instance/name')

    def token(self):
        if self._token is None:
            self._token = json.loads(self.meta('instance/service-accounts/default/token'))['access_token']
        return self._token

    def call(self, method, path, body=None):
        data = json.dumps(body).encode('utf-8') if body is not None else None
        request = Request('%s/compute/v1/%s' % (self.api, path), data=data, method=method,
                          headers={'Authorization': 'Bearer %s' % self.token(), 'Content-Type': 'application/json'})
        return json.loads(fetch(request, timeout=self.timeout).read().decode('utf-8') or '{}')


def _error_text(err):
    if isinstance(err, HTTPError):
        try:
            body = json.loads(err.read().decode('utf-8'))
            return '%s %s' % (err.code, (body.get('error') or {}).get('message'))
        except ValueError:
            return '%s %s' % (err.code, err.reason)
    return '%s: %s' % (type(err).__name__, err)


class Log:
    """Where a run's lines go: standard output (the journal), ``path`` (appended) and the serial console
    (``serial``: a device such as /dev/ttyS0, or the http URL a try-out cloud takes serial output at)."""

    def __init__(self, path=None, serial=None):
        self.path = path
        self.serial = serial

    def __call__(self, line):
        text = 'ephemera-guard: %s\n' % line
        sys.stdout.write(text)
        sys.stdout.flush()
        if self.path:
            with open(self.path, 'a') as f:
                f.write('%s %s' % (time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), text))
        if self.serial:
            try:
                if self.serial.startswith('http://') or self.serial.startswith('https://'):
                    fetch(Request(self.serial, data=text.encode('utf-8'), method='POST'), timeout=5).read()
                else:
                    with open(self.serial, 'a') as f:
                        f.write(text)
            except (IOError, OSError, URLError) as err:
                sys.stdout.write('ephemera-guard: could not write to the serial console %s: %s\n'
                                 % (self.serial, err))


def run(guest, log, now=None):
    """One tick: 0 when nothing was to be done or the delete was accepted, 1 when a step failed (retried next tick)."""
    now = time.time() if now is None else now
    try:
        project, zone, name = guest.identity()
        instance = guest.call('GET', 'projects/%s/zones/%s/instances/%s' % (project, zone, name))
    except (IOError, OSError, ValueError, KeyError) as err:
        log('GUARD FAILED: could not read this instance\'s identity or labels (%s); trying again at the next tick'
            % _error_text(err))
        return 1
    decision, reason = decide(instance.get('labels') or {}, now)
    log('instance %s in %s: %s (%s)' % (name, zone, decision, reason))
    if decision != DELETE:
        return 0
    try:
        op = guest.call('DELETE', 'projects/%s/zones/%s/instances/%s' % (project, zone, name))
    except (IOError, OSError, ValueError) as err:
        log('GUARD FAILED: the self-delete of instance %s was refused or failed (%s). The instance stays and costs '
            'money: grant its service account %s, or delete it by hand; trying again at the next tick'
            % (name, _error_text(err), PERMISSION))
        return 1
    log('self-delete of instance %s requested (operation %s)' % (name, op.get('name')))
    return 0


def check(guest, log):
    """0 when the service account may delete the instance, 3 when it may not, 1 when that could not be found out."""
    try:
        project, zone, name = guest.identity()
        answer = guest.call('POST', 'projects/%s/zones/%s/instances/%s/testIamPermissions' % (project, zone, name),
                            {'permissions': [PERMISSION]})
    except (IOError, OSError, ValueError, KeyError) as err:
        log('could not check the service account\'s permissions (%s)' % _error_text(err))
        return 1
    if PERMISSION in (answer.get('permissions') or []):
        log('the service account may delete instance %s: the guard can reclaim it' % name)
        return 0
    log('GUARD CANNOT WORK: the service account of instance %s lacks %s; the guard could not delete it when it '
        'expires' % (name, PERMISSION))
    return 3


def main(argv=None):
    parser = argparse.ArgumentParser(prog='ephemera-gcp-guard')
    parser.add_argument('command', choices=['run', 'check'])
    parser.add_argument('--metadata', default=None, help='metadata server URL (default: GCE_METADATA_HOST or %s)'
                        % DEFAULT_METADATA)
    parser.add_argument('--api', default=DEFAULT_API)
    parser.add_argument('--log', default=None, help='a file to append every line to as well')
    parser.add_argument('--serial', default='/dev/ttyS0')
    args = parser.parse_args(argv)
    metadata = args.metadata or ('http://%s' % os.environ['GCE_METADATA_HOST'] if os.environ.get('GCE_METADATA_HOST')
                                 else DEFAULT_METADATA)
    guest = Guest(metadata, args.api)
    log = Log(args.log, args.serial)
    return run(guest, log) if args.command == 'run' else check(guest, log)


if __name__ == '__main__':
    raise SystemExit(main())
