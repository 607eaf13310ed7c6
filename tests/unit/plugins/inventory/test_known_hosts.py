"""The inventory's known-hosts file: which recorded host keys it pins, how SSH is told to use it, how it is written."""

import os
import shlex

from ansible_collections.ephemera.workspaces.plugins.inventory import workspaces as inv

KEY_A = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'
KEY_B = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'


def ws(name, address='10.0.0.5', key=KEY_A, port=22, status='ready', live='running'):
    return dict(name=name, address=address, host_key=key, ssh_port=port, status=status, live_status=live)


def test_endpoints_as_ssh_names_them():
    assert inv.known_hosts_name('10.0.0.5', 22) == '10.0.0.5'
    assert inv.known_hosts_name('10.0.0.5', 2222) == '[10.0.0.5]:2222'
    assert inv.known_hosts_name('2001:db8::5', 22) == '2001:db8::5'
    assert inv.known_hosts_name('2001:db8::5', 2222) == '[2001:db8::5]:2222'


def test_pins_recorded_keys_of_workspaces_that_may_answer():
    pinned, conflicts = inv.known_hosts([
        ws('a'), ws('b', address='10.0.0.6', key=KEY_B, port=2222),
        ws('no-key', address='10.0.0.7', key=None), ws('no-address', address=None),
        ws('stopped', address='10.0.0.8', live='stopped'), ws('gone', address='10.0.0.9', live='absent'),
        ws('other', address='10.0.0.10', live='mismatch'), ws('destroyed', address='10.0.0.11', status='destroyed'),
        ws('unknown', address='10.0.0.12', live='unknown'),
        ws('bad-key', address='10.0.0.13', key='ssh-ed25519 AAAA\n10.0.0.1 ssh-rsa AAAA'),
        ws('bad-address', address='10.0.0.14,*'),
    ])
    assert pinned == {'10.0.0.5': KEY_A, '[10.0.0.6]:2222': KEY_B, '10.0.0.12': KEY_A}
    assert conflicts == {}


def test_an_address_claimed_with_two_keys_is_pinned_to_neither():
    pinned, conflicts = inv.known_hosts([ws('old'), ws('new', key=KEY_B), ws('elsewhere', address='10.0.0.6'),
                                         ws('same-key-too', address='10.0.0.6')])
    assert pinned == {'10.0.0.6': KEY_A}
    assert conflicts == {'10.0.0.5': ['new', 'old']}


def test_ssh_options_name_the_file_and_survive_ansibles_split():
    args = inv.ssh_common_args('/home/ops/.cache/ephemera/known_hosts/0123')
    assert args == '-o UserKnownHostsFile=/home/ops/.cache/ephemera/known_hosts/0123 -o StrictHostKeyChecking=yes'
    odd = inv.ssh_common_args('/srv/my hosts/100%/known')
    assert shlex.split(odd) == ['-o', 'UserKnownHostsFile="/srv/my hosts/100%%/known"', '-o',
                                'StrictHostKeyChecking=yes']


def test_default_file_is_one_per_journal_under_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    one, other = inv.default_known_hosts_file('/a/journal.sqlite'), inv.default_known_hosts_file('/b/journal.sqlite')
    assert os.path.dirname(one) == str(tmp_path / 'ephemera' / 'known_hosts') and one != other
    assert inv.default_known_hosts_file('/a/journal.sqlite') == one


def test_written_atomically_0600_and_only_when_it_changes(tmp_path):
    path = str(tmp_path / 'cache' / 'known_hosts')
    text = inv.known_hosts_text({'10.0.0.5': KEY_A}, '/j.sqlite')
    assert text.splitlines() == ['# SSH host keys recorded in the journal /j.sqlite; written by the '
                                 'ephemera.workspaces.workspaces inventory.', '10.0.0.5 ' + KEY_A]
    assert inv.write_known_hosts(path, text, make_directory=True) is True
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    inode = os.stat(path).st_ino
    assert inv.write_known_hosts(path, text, make_directory=True) is False
    assert os.stat(path).st_ino == inode
    assert inv.write_known_hosts(path, text + '10.0.0.6 ' + KEY_B + '\n', make_directory=True) is True
    assert os.stat(path).st_ino != inode  # replaced by a rename, never rewritten in place
    assert sorted(os.listdir(os.path.dirname(path))) == ['known_hosts']


def test_inline_options_carry_the_one_key_and_survive_ansibles_split():
    args = shlex.split(inv.inline_ssh_args('[10.0.0.5]:2222', KEY_A))
    assert args == ['-o', 'UserKnownHostsFile=/dev/null', '-o', 'GlobalKnownHostsFile=/dev/null',
                    '-o', 'StrictHostKeyChecking=yes', '-o', 'HostKeyAlgorithms=ssh-ed25519',
                    '-o', 'KnownHostsCommand=/bin/echo [10.0.0.5]:2222 ' + KEY_A]
    rsa = 'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC' + 'x' * 40
    assert '-o HostKeyAlgorithms=rsa-sha2-512,rsa-sha2-256' in inv.inline_ssh_args('10.0.0.5', rsa)
    # No key (a stopped workspace, or two that record different keys at the address): SSH knows none and refuses.
    assert shlex.split(inv.inline_ssh_args('10.0.0.5', None)) == [
        '-o', 'UserKnownHostsFile=/dev/null', '-o', 'GlobalKnownHostsFile=/dev/null', '-o', 'StrictHostKeyChecking=yes']
