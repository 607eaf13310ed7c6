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

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)
ANSIBLE_GALAXY = os.path.join(BIN, 'ansible-galaxy')
ANSIBLE_DOC = os.path.join(BIN, 'ansible-doc')

# Everything at the top of the tarball.
TOP = {
    'MANIFEST.json', 'FILES.json', 'README.md', 'LICENSE', 'CHANGELOG.rst', 'requirements.txt',
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
        return dict((member.name.rstrip('/'), member) for member in tar.getmembers())


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


# What `make demo` and the try-out cluster leave in a checkout: a journal, its controller secret, the cluster's CA key
# and settings (with its API token), an SSH private key, archives of agents' work.
STATE = ('journal.sqlite', 'journal.sqlite-wal', 'journal.sqlite.secret', 'cluster/pki/ca.key', 'cluster/pki/ca.pem',
         'cluster/pki/server.key', 'cluster/ssh/id_ed25519', 'cluster/ssh/id_ed25519.pub', 'cluster/cluster.json',
         'archives/demo/bundle.git')
# The demo's state directory under its default name, and under another (DEMO_DIR=demo-state make demo).
STATE_DIRS = ('.localpve-demo', 'demo-state', 'docs/scratch')


@pytest.fixture(scope='module')
def planted(tmp_path_factory):
    """A copy of this checkout's tracked files, a git work tree of its own, with the demo's state planted in it."""
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
    for directory in STATE_DIRS:
        for name in STATE:
            path = copy / directory / name
            os.makedirs(str(path.parent), exist_ok=True)
            path.write_text('PLANTED SECRET %s/%s\n' % (directory, name))
    return str(copy), set(tracked)


def contents_of(tarball):
    with tarfile.open(tarball) as tar:
        return dict((m.name.rstrip('/'), tar.extractfile(m).read() if m.isfile() else b'') for m in tar.getmembers())


def assert_no_state(members):
    leaked = sorted(name for name, data in members.items() if b'PLANTED SECRET' in data
                    or any(name.endswith(part) for part in STATE))
    assert leaked == []


def test_a_plain_galaxy_build_of_a_checkout_where_the_demo_ran_holds_none_of_its_state(planted, tmp_path):
    copy, dummy = planted
    run([ANSIBLE_GALAXY, 'collection', 'build', '--output-path', str(tmp_path), copy])
    [tarball] = glob.glob(str(tmp_path / '*.tar.gz'))
    assert_no_state(contents_of(tarball))


def test_the_clean_build_holds_only_tracked_files(planted, tmp_path):
    copy, tracked = planted
    run([os.path.join(copy, 'scripts', 'build-collection.sh'), str(tmp_path)],
        env=dict(os.environ, ANSIBLE_GALAXY=ANSIBLE_GALAXY))
    [tarball] = glob.glob(str(tmp_path / '*.tar.gz'))
    members = contents_of(tarball)
    assert_no_state(members)
    files = set(name for name, data in members.items() if name not in ('MANIFEST.json', 'FILES.json')
                and not tarfile.open(tarball).getmember(name).isdir())
    assert files and files <= tracked, sorted(files - tracked)
    assert 'plugins/module_utils/core/ownership.py' in files
