"""The collection's tarball, as ``ansible-galaxy collection build`` makes it from this checkout: what runs and its
documentation, the licence and the changelog, nothing of the tests, the try-out cluster or the development tools;
and, installed into an empty collections path, ansible-doc finds every module in it."""

import glob
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import types

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)
ANSIBLE_GALAXY = os.path.join(BIN, 'ansible-galaxy')
ANSIBLE_DOC = os.path.join(BIN, 'ansible-doc')

# Everything at the top of the tarball.
TOP = {
    'MANIFEST.json', 'FILES.json', 'README.md', 'LICENSE', 'CHANGELOG.rst', 'requirements.txt',
    # Each cloud provider's SDK, and psycopg for a journal on PostgreSQL.
    'requirements-aws.txt', 'requirements-hetzner.txt', 'requirements-gcp.txt', 'requirements-azure.txt',
    'requirements-postgresql.txt',
    'plugins', 'roles', 'playbooks', 'meta', 'docs', 'changelogs', 'inventories',
    # What an execution environment with this collection needs (meta/execution-environment.yml names them).
    'requirements-ee.txt', 'bindep.txt',
}
# Where the directories above hold less than the checkout: the rest of it is for development only.
ONLY = {
    'changelogs': {'changelogs/changelog.yaml'},
    'inventories': {'inventories/example.workspaces.yml', 'inventories/awx.workspaces.yml'},
}
# Nothing under these, anywhere in the tarball.
NEVER = ('tests/', 'bench/', 'scripts/', 'build/', 'inventories/localpve', 'changelogs/fragments', '.',
         'execution-environment.yml', 'collections/', 'extensions/')
NEVER_NAMES = ('Makefile', 'pytest.ini', 'requirements-test.txt', 'conftest.py', 'galaxy.yml', '.gitignore',
               'molecule.yml')
# The text of the GNU General Public License, version 3 (https://www.gnu.org/licenses/gpl-3.0.txt).
GPL3_SHA256 = '3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986'


def run(command, env=None):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, '%s failed (%d):\n%s\n%s' % (
        ' '.join(command), done.returncode, done.stdout, done.stderr)
    return done.stdout


def galaxy():
    with open(os.path.join(ROOT, 'galaxy.yml')) as meta:
        return yaml.safe_load(meta)


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp('build')
    run([ANSIBLE_GALAXY, 'collection', 'build', '--output-path', str(out), ROOT])
    tarballs = glob.glob(str(out / '*.tar.gz'))
    assert len(tarballs) == 1, tarballs
    return tarballs[0]


@pytest.fixture(scope='module')
def members(built):
    with tarfile.open(built) as tar:
        return {member.name.rstrip('/'): member for member in tar.getmembers()}


def read(built, name):
    with tarfile.open(built) as tar:
        return tar.extractfile(name).read()


def module_names():
    return sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(ROOT, 'plugins', 'modules', '*.py')))


def test_the_top_holds_what_runs_and_its_documentation(members):
    assert set(name.split('/')[0] for name in members) == TOP


def test_development_files_stay_out(members):
    for top, allowed in ONLY.items():
        files = set(name for name, member in members.items() if name.startswith(top + '/') and not member.isdir())
        assert files == allowed, top
    for name in members:
        assert not name.startswith(NEVER), name
        assert os.path.basename(name) not in NEVER_NAMES, name
        assert not os.path.basename(name).startswith(('test_', '.')), name
        assert '__pycache__' not in name and not name.endswith('.pyc'), name


def test_every_plugin_role_and_playbook_of_the_checkout_is_in_it(members):
    for part in ('plugins', 'roles', 'playbooks', 'meta', 'docs'):
        tracked = run(['git', '-C', ROOT, 'ls-files', '--', part]).split()
        missing = [name for name in tracked if os.path.exists(os.path.join(ROOT, name)) and name not in members]
        assert not missing, missing


def test_licence_is_the_gpl_version_3(built, members):
    licence = read(built, 'LICENSE')
    assert hashlib.sha256(licence).hexdigest() == GPL3_SHA256
    assert b'GNU GENERAL PUBLIC LICENSE' in licence and b'Version 3, 29 June 2007' in licence


def test_metadata_names_the_project(built):
    info = json.loads(read(built, 'MANIFEST.json'))['collection_info']
    assert info['license'] == ['GPL-3.0-or-later'] == galaxy()['license']
    for key in ('repository', 'documentation', 'homepage', 'issues'):
        assert info[key] and info[key].startswith('https://github.com/ephemera-dev/workspaces'), (key, info[key])
    assert 'example.invalid' not in json.dumps(info)
    with open(os.path.join(ROOT, 'galaxy.yml')) as meta:
        assert 'example.invalid' not in meta.read()


def version_key(version):
    return tuple(int(part) for part in version.split('.'))


def test_changelog_has_releases_up_to_this_version(built):
    """Each release has its summary; none is newer than the version built (which may be ahead of the last release,
    while its changes are still fragments); CHANGELOG.rst shows the last one."""
    releases = yaml.safe_load(read(built, 'changelogs/changelog.yaml'))['releases']
    assert releases, 'the changelog has no release'
    for version, release in releases.items():
        assert release['changes']['release_summary'], version
    last = max(releases, key=version_key)
    assert version_key(last) <= version_key(galaxy()['version'])
    assert 'v%s\n' % last in read(built, 'CHANGELOG.rst').decode()


def test_installed_tarball_documents_every_module(built, tmp_path):
    """Installed into an empty collections path, the collection is found there (not in this checkout) and
    ansible-doc lists and renders each of its modules."""
    path = str(tmp_path / 'collections')
    # Only that path: the venv links this checkout in as ansible_collections.ephemera.workspaces (make venv), which
    # ansible-galaxy would take for an installed copy and ansible-doc would find.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=path, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='0', ANSIBLE_NOCOLOR='1')
    run([ANSIBLE_GALAXY, 'collection', 'install', '--offline', built, '-p', path], env=env)
    listed = json.loads(run([ANSIBLE_DOC, '-t', 'module', '-l', 'ephemera.workspaces', '--json'], env=env))
    expected = ['ephemera.workspaces.' + name for name in module_names()]
    assert sorted(listed) == expected
    docs = json.loads(run([ANSIBLE_DOC, '-t', 'module', '--json'] + expected, env=env))
    assert sorted(docs) == expected
    installed = os.path.join(path, 'ansible_collections', 'ephemera', 'workspaces')
    for name, doc in docs.items():
        assert doc['doc']['filename'].startswith(installed), (name, doc['doc']['filename'])
        assert doc['doc']['short_description'] and doc['return'], name


# The demo's state directory under its default name, under another (make demo DEMO_DIR=demo-state) and deeper in
# the tree, each holding what every try-out place and the demo write (plant_tryout_state).
STATE_DIRS = ('.localpve-demo', 'demo-state', 'docs/scratch', 'playbooks/demo-state')
PLANTED = b'PLANTED STATE'


def _planted(path, text=''):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as out:
        out.write(PLANTED + b' ' + text.encode() + b'\n')


def _guest_files(guests, key, debian=False):
    """A guest's directory as the try-out places leave it (tests/localpve/guests.py, debian.py)."""
    names = ['ssh_host_ed25519_key', 'ssh_host_ed25519_key.pub', 'sshd.log', 'sshd.pid',
             'root/etc/ssh/ssh_host_ed25519_key', 'root/root/.ssh/authorized_keys', 'root/var/lib/ephemera/agent.env',
             'root/srv/work/.git/config']
    if debian:
        names += ['stack.json', 'init.log', 'init.pid', 'work/work/x']
    for name in names:
        _planted(os.path.join(guests, str(key), name), name)


def plant_tryout_state(directory):
    """Every kind of file the try-out places and the demo write into their state directories, written by their own
    code where it is cheap (secrets, CA and SSH keys, the journal and its secret) and planted by the names their code
    uses for the rest. Returns the secrets written (none may be in a tarball)."""
    from tests.localcloud import config as cloud_config
    from tests.localcloud.azure_guests import AzureGuests
    from tests.localcloud.azure_site import AzurePart
    from tests.localcloud.gcp_guests import GcpGuests
    from tests.localcloud.hetzner_guests import HetznerGuests
    from tests.localcloud.hetzner_site import HetznerPart
    from tests.localcloud.machines import MachineGuests
    from tests.localcloud.site import CloudSite
    from tests.localpve import config as pve_config, harness, pki
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal

    found = []
    # The try-out cluster (tests/localpve, docs/localpve.md "Files of a state directory").
    cluster = os.path.join(directory, 'cluster')
    site = harness.Site.__new__(harness.Site)
    site.options = types.SimpleNamespace(state_dir=cluster)
    for sub in ('ssh', 'pki', 'guests'):  # as the cluster's start makes them
        os.makedirs(os.path.join(cluster, sub), exist_ok=True)
    found += list(site._load_secrets().values())  # pylint: disable=protected-access
    pki.ensure_pki(os.path.join(cluster, 'pki'), ('127.0.0.1',))
    pki.ssh_key_pair(os.path.join(cluster, 'ssh', 'id_ed25519'), 'localpve')
    for name in (pve_config.INFO_FILE, harness.DATACENTER_FILE, 'cluster.log', 'ssh/known_hosts'):
        _planted(os.path.join(cluster, name), name)
    _guest_files(os.path.join(cluster, 'guests'), 9000)
    _guest_files(os.path.join(cluster, 'guests'), 9001, debian=True)
    _planted(os.path.join(cluster, 'guests', 'layers', 'base', 'etc', 'shadow'))
    # The debian tier's cache and its package cache (tests/localpve/debian.py, pkgcache.py), when their variables
    # point into the checkout.
    cache = os.path.join(directory, 'debian-cache')
    _planted(os.path.join(cache, 'bookworm-0123abcd', 'etc', 'shadow'))
    _planted(os.path.join(cache, 'packages', 'deb.debian.org', 'pool', 'main', 'g', 'git', 'git_2.39_amd64.deb'))
    _planted(os.path.join(cache, 'packages', 'pypi', 'requests-2.32.3-py3-none-any.whl'))
    # The try-out cloud (tests/localcloud, docs/localcloud.md): AWS, Hetzner, Azure and Compute Engine parts.
    cloud = os.path.join(directory, 'cloud')
    for sub in ('ssh', 'pki', 'guests'):
        os.makedirs(os.path.join(cloud, sub), exist_ok=True)
    csite = CloudSite.__new__(CloudSite)
    csite.options = types.SimpleNamespace(state_dir=cloud)
    found += list(csite._load_secrets().values())  # pylint: disable=protected-access
    for part in (HetznerPart, AzurePart):
        one = part.__new__(part)
        one.site = csite
        found += list(one.stored_secrets({'planted': 'PLANTED-%s' % part.secrets_file}).values())
    pki.ensure_pki(os.path.join(cloud, 'pki'), ('127.0.0.1',))
    pki.ssh_key_pair(os.path.join(cloud, 'ssh', 'id_ed25519'), 'localcloud')
    for guests in (MachineGuests, HetznerGuests, AzureGuests, GcpGuests):
        _planted(os.path.join(cloud, 'ssh', guests.known_hosts_name))
    for name in (cloud_config.INFO_FILE, 'cloud.log'):
        _planted(os.path.join(cloud, name), name)
    for key in ('i-0123456789abcdef0', 'azure1', 'hetzner42', 'gcp7'):
        _guest_files(os.path.join(cloud, 'guests'), key)
    # The demo (scripts/demo.sh): a journal with its controller secret and write-ahead files, archives.
    journal_path = os.path.join(directory, 'journal.sqlite')
    with Journal.open(journal_path) as journal:
        journal.create_workspace('demo', repo='file:///srv/repo.git', ref='main', purpose='try it')
    secret = ownership.load_secret(journal_path)  # the controller secret, made beside the journal as a run makes it
    found.append(secret.decode('ascii') if isinstance(secret, bytes) else secret)
    for name in ('journal.sqlite-wal', 'journal.sqlite-shm'):
        _planted(os.path.join(directory, name))
    for name in ('metadata.json', 'bundle.git', 'work.patch', 'events.jsonl'):
        _planted(os.path.join(directory, 'archives', 'demo', '20260101T000000Z', name))
    _planted(os.path.join(directory, 'known_hosts'))
    return [value for value in found if isinstance(value, str) and len(value) >= 8]


@pytest.fixture(scope='module')
def planted(tmp_path_factory):
    """A copy of this checkout's tracked files, a git work tree of its own, with the try-out places' and the demo's
    state in it under several names. Returns the copy, the tracked files, every state file and every secret."""
    copy = tmp_path_factory.mktemp('checkout')
    tracked = [p for p in run(['git', '-C', ROOT, 'ls-files', '-z']).split('\0') if p and os.path.isfile(
        os.path.join(ROOT, p))]
    for path in tracked:
        os.makedirs(os.path.dirname(str(copy / path)) or str(copy), exist_ok=True)
        with open(os.path.join(ROOT, path), 'rb') as src, open(str(copy / path), 'wb') as dst:
            dst.write(src.read())
        os.chmod(str(copy / path), os.stat(os.path.join(ROOT, path)).st_mode & 0o777)
    run(['git', '-C', str(copy), 'init', '-q'])
    run(['git', '-C', str(copy), 'add', '-A'])
    found = []
    for directory in STATE_DIRS:
        found += plant_tryout_state(str(copy / directory))
    state = sorted(os.path.relpath(os.path.join(top, name), str(copy)) for directory in STATE_DIRS
                   for top, _dirs, names in os.walk(str(copy / directory)) for name in names)
    for name in ('secrets.json', 'hetzner-secrets.json', 'azure-secrets.json', 'ca.key', 'id_ed25519',
                 'journal.sqlite.secret'):
        assert any(path.endswith('/' + name) for path in state), name  # the planting wrote every kind of secret
    return str(copy), set(tracked), state, found


def contents_of(tarball):
    with tarfile.open(tarball) as tar:
        return {m.name.rstrip('/'): tar.extractfile(m).read() if m.isfile() else b'' for m in tar.getmembers()}


def assert_no_state(members, state, found):
    leaked = sorted(name for name in members if name in state or name.startswith(tuple(
        directory + '/' for directory in STATE_DIRS)))
    assert leaked == []
    holding = sorted(name for name, data in members.items() if PLANTED in data or b'OPENSSH PRIVATE KEY' in data
                     or b'PRIVATE KEY-----' in data or any(value.encode() in data for value in found))
    assert holding == []


def meant_to_ship(tracked):
    """What the tarball is for, from the files git tracks: the tops of TOP (the directories whole, unless ONLY says
    less), nothing else."""
    ship = set()
    for name in tracked:
        top = name.split('/')[0]
        if top not in TOP or name.startswith(NEVER) or os.path.basename(name) in NEVER_NAMES:
            continue
        if top in ONLY and name not in ONLY[top]:
            continue
        ship.add(name)
    return ship


def files_of(tarball):
    with tarfile.open(tarball) as tar:
        return set(m.name for m in tar.getmembers() if m.isfile()) - {'MANIFEST.json', 'FILES.json'}


def test_a_plain_build_ships_exactly_the_collection_whatever_state_the_tryout_places_left(planted, tmp_path):
    """ansible-galaxy collection build in a checkout holding the state of every try-out place and of the demo under
    several names: the tarball holds what galaxy.yml's manifest allows, which is every tracked file meant to ship and
    nothing else; none of the state files, none of their secrets."""
    copy, tracked, state, found = planted
    run([ANSIBLE_GALAXY, 'collection', 'build', '--output-path', str(tmp_path), copy])
    [tarball] = glob.glob(str(tmp_path / '*.tar.gz'))
    assert_no_state(contents_of(tarball), state, found)
    assert files_of(tarball) == meant_to_ship(tracked)


def test_a_plain_galaxy_build_of_a_checkout_where_the_demo_ran_holds_none_of_its_state(planted, tmp_path):
    copy, dummy, state, found = planted
    run([ANSIBLE_GALAXY, 'collection', 'build', '--output-path', str(tmp_path), copy])
    [tarball] = glob.glob(str(tmp_path / '*.tar.gz'))
    assert_no_state(contents_of(tarball), state, found)


def test_the_clean_build_holds_only_tracked_files(planted, tmp_path):
    copy, tracked, state, found = planted
    run([os.path.join(copy, 'scripts', 'build-collection.sh'), str(tmp_path)],
        env=dict(os.environ, ANSIBLE_GALAXY=ANSIBLE_GALAXY))
    [tarball] = glob.glob(str(tmp_path / '*.tar.gz'))
    members = contents_of(tarball)
    assert_no_state(members, state, found)
    files = set(name for name, data in members.items() if name not in ('MANIFEST.json', 'FILES.json')
                and not tarfile.open(tarball).getmember(name).isdir())
    assert files and files <= tracked, sorted(files - tracked)
    assert 'plugins/module_utils/core/ownership.py' in files
