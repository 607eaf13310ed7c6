"""SSH to a guest through an ssh-agent, as AWX hands over a Machine credential: a real sshd on a loopback address, a
real ssh-agent process holding the key (ssh-add), and the collection's Guest with no key file. Without the agent, or
with an agent that holds no key, the key check says what to do. Beside them, the Guest's connection itself: Nagle's
algorithm off, a closed port, and a guest that stalls in the key exchange, each with an error that says which."""

import getpass
import os
import socket
import subprocess
import threading
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    AGENT_ENV,
    Guest,
    SshAuthError,
    SshError,
    SshUnavailable,
    check_private_key,
)
from tests.localpve.cluster import pick_host

SSHD = '/usr/sbin/sshd'


def free_port(host):
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def wait_for(condition, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError('never saw %s' % what)
        time.sleep(0.05)


def keygen(path):
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', path], check=True)
    return path


@pytest.fixture(scope='module')
def guest(tmp_path_factory):
    """A real sshd on its own loopback address that lets in one key; its address, port, user and the key."""
    base = tmp_path_factory.mktemp('agent')
    key = keygen(str(base / 'id_guest'))
    host_key = keygen(str(base / 'host_key'))
    authorized = base / 'authorized_keys'
    authorized.write_text(open(key + '.pub').read())
    os.makedirs('/run/sshd', exist_ok=True)
    host = pick_host()
    port = free_port(host)
    proc = subprocess.Popen([SSHD, '-D', '-e', '-f', '/dev/null', '-p', str(port), '-o', 'ListenAddress=%s' % host,
                             '-o', 'HostKey=%s' % host_key, '-o', 'AuthorizedKeysFile=%s' % authorized,
                             '-o', 'StrictModes=no', '-o', 'PasswordAuthentication=no', '-o', 'UsePAM=no',
                             '-o', 'PidFile=none'],
                            stdout=subprocess.DEVNULL, stderr=open(str(base / 'sshd.log'), 'w'))
    try:
        wait_for(lambda: _listening(host, port), 'sshd on %s:%d' % (host, port))
        yield dict(host=host, port=port, user=getpass.getuser(), key=key, base=base)
    finally:
        proc.kill()
        proc.wait()


def _listening(host, port):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A real ssh-agent on a socket of this test (stopped by its pid); SSH_AUTH_SOCK names it."""
    sock = str(tmp_path / 'agent.sock')
    proc = subprocess.Popen(['ssh-agent', '-D', '-a', sock], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.exists(sock), 'the ssh-agent socket')
        monkeypatch.setenv(AGENT_ENV, sock)
        yield sock
    finally:
        proc.kill()
        proc.wait()


def ssh_add(sock, key):
    subprocess.run(['ssh-add', '-q', key], check=True, env=dict(os.environ, SSH_AUTH_SOCK=sock),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_guest_is_reached_with_the_key_the_agent_holds(guest, agent):
    ssh_add(agent, guest['key'])
    check_private_key(None)
    with Guest(guest['host'], port=guest['port'], user=guest['user']).connect() as session:
        result = session.run(['sh', '-c', 'echo "in $0"', 'guest'])
        assert result.rc == 0 and result.stdout.strip() == 'in guest'
        assert session.host_key.startswith('ssh-ed25519 ')


def test_an_agent_without_the_key_is_refused_by_the_guest_and_by_the_check(guest, agent, tmp_path):
    other = keygen(str(tmp_path / 'id_other'))
    # An empty agent: the key check says so before anything is cloned.
    with pytest.raises(SshError, match='holds no key') as empty:
        check_private_key(None)
    assert 'ssh-add' in str(empty.value)
    ssh_add(agent, other)
    with pytest.raises(SshAuthError) as refused:
        Guest(guest['host'], port=guest['port'], user=guest['user']).connect()
    assert 'of the ssh-agent (SSH_AUTH_SOCK=%s)' % agent in str(refused.value)


def test_without_key_file_or_agent_the_check_names_both(monkeypatch):
    monkeypatch.delenv(AGENT_ENV, raising=False)
    with pytest.raises(SshError) as missing:
        check_private_key(None)
    assert 'ssh_private_key' in str(missing.value) and 'SSH_AUTH_SOCK is not set' in str(missing.value)


def test_a_key_file_wins_over_the_agent(guest, agent):
    # The agent holds no key; the key file logs in.
    with Guest(guest['host'], port=guest['port'], user=guest['user'], key_file=guest['key']).connect() as session:
        assert session.run('true').rc == 0


def test_the_connection_sends_each_message_at_once_and_a_closed_port_is_still_a_clear_error(guest):
    # Nagle's algorithm off: each small message of the protocol goes out without waiting for the answer to the last.
    with Guest(guest['host'], port=guest['port'], user=guest['user'], key_file=guest['key']).connect() as session:
        sock = session._client.get_transport().sock  # pylint: disable=protected-access
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert session.run('true').rc == 0
    closed = free_port(guest['host'])
    with pytest.raises(SshUnavailable, match='cannot connect'):
        Guest(guest['host'], port=closed, user=guest['user'], key_file=guest['key']).connect()


def test_a_guest_that_stalls_in_the_key_exchange_is_named_with_the_time_it_was_given():
    """A guest that answers with its banner and then says nothing more, as an overloaded one does: the error says
    the handshake did not finish in time, not paramiko's "No existing session"."""
    host = pick_host()
    with socket.socket() as listener:
        listener.bind((host, 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def stalled():
            conn = listener.accept()[0]
            with conn:
                conn.sendall(b'SSH-2.0-OpenSSH_9.2p1 stalled\r\n')
                while conn.recv(4096):
                    pass
        server = threading.Thread(target=stalled, daemon=True)
        server.start()
        started = time.monotonic()
        with pytest.raises(SshUnavailable) as stalled_error:
            Guest(host, port=port, user='root', connect_timeout=1.5).connect()
        waited = time.monotonic() - started
        server.join(10)
    assert 'the SSH handshake did not finish within 1.5 s' in str(stalled_error.value)
    assert 'No existing session' not in str(stalled_error.value)
    assert waited >= 1.5 and not server.is_alive()
