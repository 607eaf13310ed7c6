# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""OpenSSH options that pin a guest to the host key the journal recorded for it, without any known-hosts file of the
user's: what the inventory hands Ansible's SSH connection (``host_key_pinning: inline``) and the command line a
create prints to reach its workspace."""

import posixpath
import shlex


def known_hosts_name(address, port):
    """How a known-hosts file names an SSH endpoint: the address, or ``[address]:port`` for a port other than 22."""
    return address if int(port) == 22 else '[%s]:%d' % (address, int(port))


def host_key_algorithms(key_type):
    """The SSH host key algorithms of a key type (an RSA key signs with SHA-2, never SHA-1)."""
    return 'rsa-sha2-512,rsa-sha2-256' if key_type == 'ssh-rsa' else key_type


def inline_options(endpoint, key):
    """OpenSSH options (a list) that pin ``endpoint`` to ``key`` ("type base64") without a file: SSH reads no
    known-hosts file, asks ``KnownHostsCommand`` (which prints the one line; OpenSSH 8.5 or later), offers only the
    key's algorithms and refuses any other key. With no ``key``, SSH knows no key for the endpoint and refuses it."""
    args = ['-o', 'UserKnownHostsFile=/dev/null', '-o', 'GlobalKnownHostsFile=/dev/null', '-o',
            'StrictHostKeyChecking=yes']
    if key:
        line = ('%s %s' % (endpoint, key)).replace('%', '%%')  # ssh expands %-tokens in the command's arguments
        args += ['-o', 'HostKeyAlgorithms=' + host_key_algorithms(key.split()[0]), '-o',
                 'KnownHostsCommand=/bin/echo ' + line]
    return args


def inline_ssh_args(endpoint, key):
    """:func:`inline_options` as one string for ``ansible_ssh_common_args`` (Ansible splits it as a shell would)."""
    return ' '.join(shlex.quote(arg) for arg in inline_options(endpoint, key))


def checkout_path(guest_root, vmid, checkout):
    """Where the checkout is, as the guest's files are reached: under ``guest_root`` (the try-out places keep each
    guest's files under a directory of this host, ``{vmid}`` standing for its id), else the path itself."""
    root = (guest_root or '/').replace('{vmid}', str(vmid))
    return posixpath.normpath(posixpath.join(root, (checkout or '/workspace/repo').lstrip('/')))


def ssh_command(record):
    """The command line that reaches a recorded workspace as the controller does: its SSH user, port and key, pinned
    to its recorded host key; None before it has an address and a recorded key."""
    params, facts = record.get('params') or {}, record.get('facts') or {}
    address, key = record.get('address'), facts.get('host_key')
    if not address or not key:
        return None
    port = params.get('ssh_port') or 22
    argv = ['ssh'] + (['-i', params['ssh_key_path']] if params.get('ssh_key_path') else []) + ['-p', str(port)]
    argv += inline_options(known_hosts_name(address, port), key)
    argv.append('%s@%s' % (params.get('ssh_user') or 'root', address))
    return ' '.join(shlex.quote(arg) for arg in argv)
