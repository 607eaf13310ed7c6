# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SSH host keys a machine publishes out of band, read as the providers give them: the block cloud-init prints to
the console (EC2's console output, a serial log), or a key type and its encoded key (guest attributes).

Every key is checked for its form before it is trusted to pin a connection: its encoded key names its own type, so
a line that only looks like a key (a fingerprint, a key of another type under a wrong name) is left out."""

import base64
import re

# The key types sshd serves and the collection pins.
KEY_TYPES = ('ssh-ed25519', 'ssh-rsa', 'ecdsa-sha2-nistp256', 'ecdsa-sha2-nistp384', 'ecdsa-sha2-nistp521')

# cloud-init prints the machine's host keys to its console between these lines (its keys_to_console module), each
# line maybe behind a syslog or journal prefix ("<14>Dec  5 00:00:00 ec2: ").
BEGIN = '-----BEGIN SSH HOST KEY KEYS-----'
END = '-----END SSH HOST KEY KEYS-----'
KEY_LINE = re.compile(r'(?:^|\s)(%s) ([A-Za-z0-9+/]{32,}={0,2})(?:\s|$)'
                      % '|'.join(re.escape(k) for k in KEY_TYPES))


def console_host_keys(text):
    """The host keys ("type base64") of the last complete block cloud-init printed to the console (a later boot
    prints it again), each checked for its form. [] when there is none."""
    found, block = [], None
    for line in (text or '').splitlines():
        if BEGIN in line:
            block = []
        elif END in line:
            if block is not None:
                found = block
            block = None
        elif block is not None:
            match = KEY_LINE.search(line)
            if match and encoded_type(match.group(2)) == match.group(1):
                block.append('%s %s' % match.groups())
    return found


def host_key(kind, blob):
    """"type base64" when ``blob`` is an encoded SSH public key of type ``kind`` (one sshd serves), else None."""
    if not isinstance(kind, str) or not isinstance(blob, str):
        return None
    kind, blob = kind.strip(), blob.strip()
    if kind not in KEY_TYPES or not re.match(r'^[A-Za-z0-9+/]{32,}={0,2}$', blob):
        return None
    return '%s %s' % (kind, blob) if encoded_type(blob) == kind else None


def encoded_type(blob):
    """The key type an SSH public key blob (base64) starts with, or None."""
    try:
        raw = base64.b64decode(blob, validate=True)
    except (ValueError, TypeError):
        return None
    size = int.from_bytes(raw[:4], 'big') if len(raw) >= 4 else -1
    if not 0 < size <= 64 or len(raw) < 4 + size:
        return None
    try:
        return raw[4:4 + size].decode('ascii')
    except UnicodeDecodeError:
        return None
