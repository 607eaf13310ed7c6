# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one SSH wrapper (paramiko underneath) for talking to workspace guests.

Host keys: a workspace is new, so its key cannot be known in advance. The first successful
connection records the key (trust on first use, per workspace, kept in the journal); every later
connection must present a recorded key or is refused. Only keys of the recorded types are offered in
the handshake, so a server cannot step around a pinned key by presenting one of another type.

Secrets travel on a command's standard input or in files written over SFTP with 0600
permissions, never on a command line, where the guest's process list would show them.

What comes back is bounded: a command's output is read up to ``max_output`` bytes (then the command
is cut off and the call fails), and a fetched file must be a regular file no larger than its cap,
read within its time limit. A file is written under a fresh name created exclusively, then renamed
over the target, so an existing symbolic link at the target is replaced, never followed.
"""

import os
import posixpath
import secrets
import shlex
import socket
import stat
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter

_LIBRARIES = {}


class SshError(EphemeraError):
    """Base of the SSH errors."""


class SshUnavailable(SshError):
    """The guest does not accept SSH connections (yet): refused, timed out, closed during the handshake."""


class SshAuthError(SshError):
    """The guest refused our key."""


class SshHostKeyMismatch(SshError):
    """The guest presented another host key than the one recorded for this workspace."""


class SshDropped(SshError):
    """The connection broke while a command ran: whether it finished is unknown."""


class SshCommandFailed(SshError):
    """A command ended with a non-zero exit status."""


class SshOutputTooLarge(SshError):
    """A command printed more than the caller reads, or a fetched file is larger than its cap or not a file."""


# What one command may print (stdout and stderr together) before it is cut off.
MAX_OUTPUT = 16 * 1024 * 1024
# What one fetched file may hold unless the caller gives another cap, and how long reading it may take.
MAX_FETCH = 1024 * 1024 * 1024
FETCH_TIMEOUT = 600.0
# paramiko's words for a connection whose key exchange had not finished when its timeout ran out.
NO_SESSION = 'No existing session'


class CommandResult:
    __slots__ = ('rc', 'stdout', 'stderr')

    def __init__(self, rc, stdout, stderr):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


def tail(text, lines=15):
    return '\n'.join(text.rstrip().splitlines()[-lines:])


def _paramiko():
    """paramiko, imported when the first guest is reached: steps that never open SSH do not pay the fifth of a
    second its import takes."""
    if 'paramiko' not in _LIBRARIES:
        try:
            import paramiko  # pylint: disable=import-outside-toplevel
        except ImportError as exc:
            raise SshError('The Python package paramiko is required on the controller: pip install paramiko (%s).'
                           % exc)
        _LIBRARIES['paramiko'] = paramiko
    return _LIBRARIES['paramiko']


KEY_HELP = ('give ssh_private_key (ephemera_ssh_private_key) as the path of the key whose public half the template authorizes, '
            'or load that key into an ssh-agent whose socket SSH_AUTH_SOCK names (as AWX does with a Machine credential)')
AGENT_ENV = 'SSH_AUTH_SOCK'


def agent_keys():
    """The keys the ssh-agent named by SSH_AUTH_SOCK holds: [] without the variable, without an agent answering on its
    socket, or with an agent that holds none."""
    if not os.environ.get(AGENT_ENV):
        return []
    paramiko = _paramiko()
    agent = paramiko.Agent()
    try:
        return list(agent.get_keys())
    except paramiko.SSHException:
        return []
    finally:
        agent.close()


def check_private_key(path):
    """Refuse a key file that cannot log in anywhere, with what to do: not given, unreadable, a public key, a
    passphrase-protected key (nothing here can type the passphrase), or not a key paramiko reads.

    Without a path the keys of the ssh-agent (SSH_AUTH_SOCK) log in: then the agent must answer and hold a key."""
    if not path:
        if agent_keys():
            return
        if os.environ.get(AGENT_ENV):
            raise SshError('No SSH private key is set, and the ssh-agent at %s=%s holds no key (or does not answer): '
                           'add the key with ssh-add, or %s.' % (AGENT_ENV, os.environ[AGENT_ENV], KEY_HELP))
        raise SshError('No SSH private key is set and no ssh-agent is there (%s is not set): %s.'
                       % (AGENT_ENV, KEY_HELP))
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        why = 'it does not exist' if not os.path.exists(path) else 'it is not a readable file'
        raise SshError('Cannot read the SSH private key %s (%s): %s.' % (path, why, KEY_HELP))
    paramiko = _paramiko()
    try:
        with open(path, 'rb') as key:
            head = key.read(64)
    except OSError as exc:
        raise SshError('Cannot read the SSH private key %s (%s): %s.' % (path, exc.strerror, KEY_HELP))
    if head.startswith((b'ssh-', b'ecdsa-', b'sk-')):
        raise SshError('%s is a public key: give the private half (usually the same path without .pub).' % path)
    try:
        paramiko.PKey.from_path(path)
    except (paramiko.PasswordRequiredException, TypeError):
        # paramiko's own exception, or the TypeError ("password-protected") of the cryptography package it uses.
        raise SshError('The SSH private key %s is protected by a passphrase, which no step can type: give a key '
                       'without one (a key kept for workspaces, in a vault or an AWX Machine credential).' % path)
    except (paramiko.SSHException, ValueError, OSError) as exc:
        raise SshError('%s is not an SSH private key (OpenSSH or PEM; RSA, ECDSA or Ed25519): %s; %s.'
                       % (path, exc, KEY_HELP))


class Guest:
    """One SSH session to a guest."""

    def __init__(self, host, port=22, user='root', key_file=None, host_key=None, connect_timeout=10.0):
        self._pm = _paramiko()
        self.host = host
        self.port = int(port)
        self.user = user
        self.key_file = key_file
        # One recorded key ("type base64"), or a list of them (a key being replaced and its successor).
        keys = host_key if isinstance(host_key, (list, tuple)) else [host_key]
        self.known_host_keys = [key for key in keys if key]
        self.known_host_key = self.known_host_keys[0] if self.known_host_keys else None
        self.connect_timeout = connect_timeout
        self.host_key = None
        # Connections wait_for_guest needed to get this one.
        self.attempts = 1
        self._client = None
        if key_file and not os.access(key_file, os.R_OK):
            raise SshError('Cannot read the SSH private key %s: %s.' % (key_file, KEY_HELP))

    @property
    def where(self):
        return '%s@%s:%d' % (self.user, self.host, self.port)

    def connect(self):
        paramiko = self._pm
        client = paramiko.SSHClient()
        disabled = {}
        if self.known_host_keys:
            client.set_missing_host_key_policy(_PinnedKeys(self, self.known_host_keys))
            disabled = {'keys': _other_key_types(paramiko, self.known_host_keys)}
        else:
            # No key is recorded yet (the first connection): accept the one presented, for this client only; it is
            # read from the transport below and recorded by the caller.
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            # The key file when one is given, else the keys of the ssh-agent (SSH_AUTH_SOCK), never both; never the
            # keys in ~/.ssh.
            client.connect(self.host, port=self.port, username=self.user, key_filename=self.key_file,
                           sock=self._socket(),
                           timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                           auth_timeout=self.connect_timeout, allow_agent=not self.key_file, look_for_keys=False,
                           disabled_algorithms=disabled)
        except SshHostKeyMismatch:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise SshHostKeyMismatch('%s presented host key %s, not the one recorded for this workspace. Refusing to '
                                     'connect: the address may now belong to another machine.'
                                     % (self.where, exc.key.get_base64()[:24] + '...'), address=self.host)
        except paramiko.SSHException as exc:
            client.close()
            if 'not found in known_hosts' in str(exc) or 'Server %r not found' in str(exc):
                raise SshHostKeyMismatch('%s presented a host key other than the recorded one: %s' % (self.where, exc))
            if isinstance(exc, paramiko.AuthenticationException):
                raise SshAuthError('%s refused the key %s: %s. Check that the template carries the matching '
                                   'authorized key.' % (self.where, self.key_file or 'of the ssh-agent (%s=%s)' % (
                                       AGENT_ENV, os.environ.get(AGENT_ENV)), exc), address=self.host)
            if str(exc) == NO_SESSION:
                # paramiko stops waiting for the key exchange at the timeout and then finds no session.
                raise SshUnavailable('%s: the SSH handshake did not finish within %g s (the guest, or this host, may '
                                     'be overloaded)' % (self.where, self.connect_timeout), address=self.host)
            raise SshUnavailable('%s: SSH handshake failed: %s' % (self.where, exc), address=self.host)
        except (socket.error, EOFError) as exc:
            client.close()
            raise SshUnavailable('%s: cannot connect: %s' % (self.where, exc), address=self.host)
        key = client.get_transport().get_remote_server_key()
        self.host_key = '%s %s' % (key.get_name(), key.get_base64())
        self._client = client
        return self

    def _socket(self):
        """The TCP connection to the guest, with Nagle's algorithm off (as OpenSSH sets it): the protocol's small
        messages (a channel's open, its request, its exit status) each wait for the answer to the one before, and
        held back for a delayed acknowledgement each cost tens of milliseconds."""
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self):
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, command, stdin=None, timeout=120.0, check=True, what=None, point=True, max_output=MAX_OUTPUT):
        """Run ``command`` (a string for the remote shell, or an argv list that is quoted here).

        ``stdin`` (str or bytes) is written to the command's standard input and closed: the place
        for secrets. Raises SshCommandFailed on a non-zero status when ``check``, SshDropped when
        the connection breaks before the status arrives, SshOutputTooLarge (the session is closed)
        when the command prints more than ``max_output`` bytes. ``point=False`` for a look repeated
        while waiting: how often it runs depends on timing, so it is no failpoint (see failpoint.py).
        """
        if isinstance(command, (list, tuple)):
            command = ' '.join(shlex.quote(str(part)) for part in command)
        what = what or command.split('\n')[0][:80]
        renewal.check()  # a step that lost its claim runs nothing more in the guest
        try:
            chan = self._client.get_transport().open_session(timeout=self.connect_timeout)
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin.encode('utf-8') if not isinstance(stdin, bytes) else stdin)
            chan.shutdown_write()
            drained = self._drain(chan, timeout, max_output)
            if drained is None:
                chan.close()
                raise SshOutputTooLarge('%s: "%s" printed more than %d bytes; it was cut off and its output is not '
                                        'used. What it reads in the guest is larger than this collection takes (see '
                                        'docs/security.md).' % (self.where, what, max_output), address=self.host)
            out, err = drained
            if not chan.exit_status_ready():
                raise SshDropped('%s: the connection closed while "%s" ran; its outcome is unknown.' % (self.where, what))
            rc = chan.recv_exit_status()
            if rc == -1:
                # paramiko's value when the channel closed without an exit status: the session was cut.
                raise SshDropped('%s: the session ended without an exit status while "%s" ran; its outcome is unknown.'
                                 % (self.where, what), address=self.host)
        except (socket.error, self._pm.SSHException, EOFError) as exc:
            raise SshDropped('%s: the connection broke while "%s" ran (%s); its outcome is unknown.'
                             % (self.where, what, exc), address=self.host)
        if point:
            failpoint.reached('ssh ' + what)
        result = CommandResult(rc, out.decode('utf-8', 'replace'), err.decode('utf-8', 'replace'))
        if check and rc != 0:
            raise SshCommandFailed('%s: "%s" failed with exit status %d: %s'
                                   % (self.where, what, rc, tail(result.stderr or result.stdout)),
                                   rc=rc, stderr_tail=tail(result.stderr))
        return result

    @staticmethod
    def _drain(chan, timeout, limit=MAX_OUTPUT):
        """(stdout, stderr) bytes, or None as soon as together they pass ``limit``."""
        out, err = [], []
        size = [0]

        def take(parts, data):
            parts.append(data)
            size[0] += len(data)
            return size[0] <= limit

        deadline = time.monotonic() + timeout
        while True:
            if chan.recv_ready():
                if not take(out, chan.recv(65536)):
                    return None
                continue
            if chan.recv_stderr_ready():
                if not take(err, chan.recv_stderr(65536)):
                    return None
                continue
            if chan.exit_status_ready() or chan.closed or chan.eof_received:
                # Whatever is still buffered belongs to the output.
                while chan.recv_ready():
                    if not take(out, chan.recv(65536)):
                        return None
                while chan.recv_stderr_ready():
                    if not take(err, chan.recv_stderr(65536)):
                        return None
                if chan.exit_status_ready() or chan.closed:
                    break
            if time.monotonic() > deadline:
                raise socket.timeout('no exit status within %ss' % timeout)
            time.sleep(0.005)
        return b''.join(out), b''.join(err)

    def put(self, path, data, mode=0o600):
        """Write ``data`` to ``path`` on the guest, created with ``mode`` before any byte is written.

        The data goes into a new file of a random name next to ``path``, created exclusively (an
        existing name, a symbolic link included, makes the create fail rather than be followed),
        which is then renamed over ``path``: a link at ``path`` is replaced, never written through.
        The directory itself must be one that only the SSH user can write to.
        """
        renewal.check()  # a step that lost its claim writes nothing more in the guest
        if not isinstance(data, bytes):
            data = data.encode('utf-8')
        temp = posixpath.join(posixpath.dirname(path), '.%s.%s.tmp' % (posixpath.basename(path), secrets.token_hex(6)))
        try:
            sftp = self._client.open_sftp()
            try:
                self._makedirs(sftp, posixpath.dirname(path))
                try:
                    with sftp.open(temp, 'wbx') as remote:
                        remote.chmod(mode)
                        remote.write(data)
                    sftp.posix_rename(temp, path)
                except BaseException:
                    try:
                        sftp.remove(temp)
                    except (IOError, OSError):
                        pass
                    raise
            finally:
                sftp.close()
        except (IOError, OSError, self._pm.SSHException, EOFError) as exc:
            raise SshError('%s: cannot write %s: %s' % (self.where, path, exc), address=self.host)
        failpoint.reached('ssh put ' + posixpath.basename(path))

    def fetch(self, path, out, max_bytes=MAX_FETCH, timeout=FETCH_TIMEOUT):
        """Copy ``path`` from the guest into the file object ``out``, in parts; returns the number of bytes.

        Only a regular file is read (a symbolic link, a FIFO or a device is refused before it is
        opened, and again if the opened file is not one), at most ``max_bytes`` of it, within
        ``timeout`` seconds: SshOutputTooLarge or SshError otherwise. An ``out`` whose ``write``
        raises an error other than OSError keeps a failure on the local side (a full disk) apart
        from a guest that cannot be read.
        """
        deadline = time.monotonic() + timeout
        try:
            sftp = self._client.open_sftp()
            try:
                sftp.get_channel().settimeout(max(min(timeout, 60.0), 1.0))
                self._check_regular(path, sftp.lstat(path), max_bytes)
                total = 0
                with sftp.open(path, 'rb') as remote:
                    attrs = remote.stat()
                    self._check_regular(path, attrs, max_bytes)
                    # Requests ahead for the size it has now (at most the cap), as paramiko's own getfo does.
                    remote.prefetch(attrs.st_size)
                    while True:
                        if time.monotonic() > deadline:
                            raise SshError('%s: reading %s took longer than %d s; stopped.' % (self.where, path, timeout),
                                           address=self.host)
                        data = remote.read(min(32768, max_bytes + 1 - total))
                        if not data:
                            return total
                        total += len(data)
                        if total > max_bytes:
                            raise SshOutputTooLarge('%s: %s grew past %d bytes while it was read; stopped.'
                                                    % (self.where, path, max_bytes), address=self.host)
                        out.write(data)
            finally:
                sftp.close()
        except (IOError, OSError, self._pm.SSHException, EOFError, socket.timeout) as exc:
            raise SshError('%s: cannot read %s: %s' % (self.where, path, exc), address=self.host)

    def _check_regular(self, path, attrs, max_bytes):
        if attrs.st_mode is None or not stat.S_ISREG(attrs.st_mode):
            raise SshOutputTooLarge('%s: %s is not a regular file (mode %s); it is not read.'
                                    % (self.where, path, oct(attrs.st_mode or 0)), address=self.host)
        if (attrs.st_size or 0) > max_bytes:
            raise SshOutputTooLarge('%s: %s holds %d bytes, more than the %d this collection takes; it is not read.'
                                    % (self.where, path, attrs.st_size, max_bytes), address=self.host)

    @staticmethod
    def _makedirs(sftp, directory):
        missing = []
        while directory not in ('', '/'):
            try:
                sftp.stat(directory)
                break
            except IOError:
                missing.append(directory)
                directory = posixpath.dirname(directory)
        for path in reversed(missing):
            sftp.mkdir(path, 0o755)


class _PinnedKeys:
    """paramiko's host key policy when keys are recorded: the presented key must be one of them."""

    def __init__(self, guest, keys):
        self.guest = guest
        self.keys = set(' '.join(key.split()[:2]) for key in keys)

    def missing_host_key(self, client, hostname, key):
        presented = '%s %s' % (key.get_name(), key.get_base64())
        if presented not in self.keys:
            raise SshHostKeyMismatch('%s presented host key %s, not one recorded for this workspace. Refusing to '
                                     'connect: the address may now belong to another machine.'
                                     % (self.guest.where, key.get_base64()[:24] + '...'), address=self.guest.host)


def _other_key_types(paramiko, keys):
    """Host key algorithms to leave out of the handshake: every one that could not present a recorded key."""
    wanted = set(key.split(' ', 1)[0] for key in keys)
    if 'ssh-rsa' in wanted:
        wanted.update(('rsa-sha2-256', 'rsa-sha2-512'))
    known = list(paramiko.Transport._preferred_keys)  # pylint: disable=protected-access
    return [name for name in known if name not in wanted]


def wait_for_guest(make_guest, timeout, backoff=None):
    """Connect with bounded retries and backoff until the guest answers; returns the connected Guest (its
    ``attempts`` says how many connections it took).

    Refusals, timeouts and broken handshakes are retried until ``timeout``; a wrong host key or a
    refused key is final at once (retrying cannot fix it).
    """
    last = {}

    def probe(remaining):
        guest = make_guest()
        last['at'] = '%s:%s' % (guest.host, guest.port)
        guest.connect_timeout = max(min(guest.connect_timeout, remaining), 1.0)
        try:
            return waiter.done(guest.connect())
        except SshUnavailable as exc:
            last['error'] = exc
            return waiter.pending(None)

    def what(_value):
        return 'SSH at %s' % last.get('at', 'the guest'), last.get('error')

    result = waiter.wait_for(probe, timeout, backoff or waiter.Backoff(start=0.1, maximum=3.0, factor=1.6, jitter=0.2),
                             what=what)
    if result.ok:
        result.value.attempts = result.attempts
        return result.value
    raise SshUnavailable('No SSH on the guest after %.0f s and %d attempts; last error: %s. Check that the guest runs '
                         'and its sshd started (the template or image must start it at boot), that %s is reachable '
                         'from this controller (the bridge or network, a firewall, the port), then run again: the '
                         'create goes on at its SSH step (ssh_timeout gives a slow guest more time).'
                         % (result.elapsed, result.attempts, last.get('error'), last.get('at', 'its address')),
                         attempts=result.attempts)
