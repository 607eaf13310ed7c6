"""The execution environment, checked the way CI can without a registry or a container engine: ``ansible-builder
create`` (ansible-builder 3) makes the build context offline from execution-environment.yml, and the generated
requirement files are what the collection needs (its Python requirements with psycopg, openssh-client and git, the
collection's own tarball from ``make collection``). ansible-builder's own introspection, run on the collection
installed from that tarball, finds the same requirements through meta/execution-environment.yml: what the image
build does in its builder stage."""

import glob
import os
import re
import subprocess
import sys
import json
import tarfile

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)


def run(command, cwd=None, env=None):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, '%s failed (%d):\n%s\n%s' % (
        ' '.join(command), done.returncode, done.stdout, done.stderr)
    return done.stdout


def load(path):
    with open(os.path.join(ROOT, path)) as handle:
        return yaml.safe_load(handle)


def requirement_lines(path):
    with open(path) as handle:
        return [line.strip() for line in handle if line.strip() and not line.lstrip().startswith('#')]


def name_of(requirement):
    return re.split(r'[<>=!~\[ ;]', requirement, 1)[0].lower()


@pytest.fixture(scope='module')
def context(tmp_path_factory):
    """The build context of execution-environment.yml, made in a copy of the files it names: the tarball built by
    scripts/build-collection.sh (as make collection builds it) into the copy's build/."""
    work = tmp_path_factory.mktemp('ee')
    for name in ('execution-environment.yml', 'requirements-ee.txt', 'bindep.txt'):
        with open(os.path.join(ROOT, name)) as src, open(str(work / name), 'w') as dst:
            dst.write(src.read())
    run([os.path.join(ROOT, 'scripts', 'build-collection.sh'), str(work / 'build')],
        env=dict(os.environ, ANSIBLE_GALAXY=os.path.join(BIN, 'ansible-galaxy')))
    out = run([os.path.join(BIN, 'ansible-builder'), 'create', '-f', 'execution-environment.yml', '-c', 'context',
               '--output-filename', 'Containerfile'], cwd=str(work))
    assert 'Complete! The build context can be found at' in out
    return work / 'context'


def test_the_definition_is_version_3_with_the_base_image_as_a_build_argument(context):
    ee = load('execution-environment.yml')
    assert ee['version'] == 3
    containerfile = (context / 'Containerfile').read_text()
    assert 'ARG EE_BASE_IMAGE="%s"' % ee['images']['base_image']['name'] in containerfile
    assert 'FROM $EE_BASE_IMAGE AS base' in containerfile


def pinned(name):
    """The version requirements-test.txt pins ``name`` to (what the tests run)."""
    for line in requirement_lines(os.path.join(ROOT, 'requirements-test.txt')):
        if name_of(line) == name and '==' in line:
            return line.split('==', 1)[1].strip()
    raise AssertionError('requirements-test.txt pins no %s' % name)


def build_args(containerfile):
    """The Containerfile's global build arguments: {name: default}."""
    return dict(re.findall(r'^ARG (\w+)="(.*)"$', containerfile, re.M))


def test_the_image_runs_the_python_ansible_core_and_ansible_runner_the_tests_run(context):
    """The RHEL 9 family's own python3 is 3.9, where ansible-core 2.17 and later do not install: the image gets its
    own Python 3.11 (the tests' version) and exactly the ansible-core and ansible-runner the tests run."""
    import importlib.metadata

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    containerfile = (context / 'Containerfile').read_text()
    args = build_args(containerfile)
    assert args['PYPKG'] == 'python3.11' and args['PYCMD'] == '/usr/bin/python3.11', args
    assert args['PKGMGR'] == '/usr/bin/dnf'
    # The interpreter is installed before pip and everything else, and every pip and check runs with it.
    base = containerfile.split('FROM base AS galaxy')[0]
    assert base.index('RUN $PKGMGR install $PYPKG -y') < base.index('RUN /output/scripts/pip_install $PYCMD')
    assert not re.search(r'^RUN (python3|pip3?) ', containerfile, re.M)
    core, runner = pinned('ansible-core'), pinned('ansible-runner')
    assert args['ANSIBLE_INSTALL_REFS'].split() == ['ansible-core==' + core, 'ansible-runner==' + runner]
    # The versions the tests run are these, and each says it installs on the image's Python.
    python = Version(sys.version.split()[0])
    image_python = Version(args['PYPKG'][len('python'):])
    assert (python.major, python.minor) == (image_python.major, image_python.minor), (
        'the image runs Python %s, the tests %s' % (image_python, python))
    for name, version in (('ansible-core', core), ('ansible-runner', runner)):
        assert importlib.metadata.version(name) == version
        requires = importlib.metadata.metadata(name)['Requires-Python'] or ''
        assert SpecifierSet(requires).contains(image_python), (name, requires, image_python)
    # The python3 of the base (3.9 on the RHEL 9 family) would not do: ansible-core says so itself.
    assert not SpecifierSet(importlib.metadata.metadata('ansible-core')['Requires-Python']).contains(Version('3.9'))


def test_the_base_is_of_the_rhel_9_family_and_only_a_default(context):
    ee = load('execution-environment.yml')
    assert ee['images']['base_image']['name'] == 'quay.io/centos/centos:stream9'
    assert ee['options']['package_manager_path'] == '/usr/bin/dnf'
    # docs/awx.md names the base and what a replacement must give.
    with open(os.path.join(ROOT, 'docs', 'awx.md')) as handle:
        doc = handle.read()
    assert 'quay.io/centos/centos:stream9' in doc and 'python3.11' in doc and 'awx-ee:24.6.1' not in doc


def test_the_python_requirements_are_the_collections_and_psycopg(context):
    generated = requirement_lines(str(context / '_build' / 'requirements.txt'))
    assert generated == requirement_lines(os.path.join(ROOT, 'requirements-ee.txt'))
    names = set(name_of(line) for line in generated)
    # Every runtime requirement of the collection, with the same bounds, and psycopg for a journal on PostgreSQL.
    runtime = requirement_lines(os.path.join(ROOT, 'requirements.txt'))
    assert set(runtime) <= set(generated), set(runtime) - set(generated)
    # Exactly the union of the core's, every provider's and PostgreSQL's requirement files: nothing else.
    union = []
    for name in ('requirements.txt', 'requirements-aws.txt', 'requirements-hetzner.txt', 'requirements-gcp.txt',
                 'requirements-azure.txt', 'requirements-postgresql.txt'):
        union += requirement_lines(os.path.join(ROOT, name))
    assert sorted(generated) == sorted(union), set(generated) ^ set(union)
    assert all(not line.startswith('-r') for line in generated)
    assert 'psycopg' in names and any(line.startswith('psycopg[binary]') for line in generated)


def test_the_system_packages_are_openssh_client_and_git(context):
    generated = requirement_lines(str(context / '_build' / 'bindep.txt'))
    packages = {line.split()[0]: line for line in generated}
    assert set(packages) == {'openssh-client', 'openssh-clients', 'git'}
    assert 'platform:dpkg' in packages['openssh-client'] and 'platform:rpm' in packages['openssh-clients']


def test_the_collection_is_its_own_tarball_of_galaxy_ymls_version(context):
    galaxy = load('galaxy.yml')
    tarball = 'ephemera-workspaces-%s.tar.gz' % galaxy['version']
    with open(str(context / '_build' / 'requirements.yml')) as handle:
        wanted = yaml.safe_load(handle)
    assert wanted == {'collections': [{'name': 'collections/' + tarball, 'type': 'file'}]}
    copied = context / '_build' / 'collections' / tarball
    with tarfile.open(str(copied)) as tar:
        manifest = json.load(tar.extractfile('MANIFEST.json'))
        names = tar.getnames()
    assert (manifest['collection_info']['namespace'], manifest['collection_info']['name'],
            manifest['collection_info']['version']) == ('ephemera', 'workspaces', galaxy['version'])
    for needed in ('meta/execution-environment.yml', 'requirements-ee.txt', 'bindep.txt', 'roles/workspace_create'):
        assert needed in names, needed


def test_the_builders_introspection_finds_the_requirements_in_the_installed_collection(context, tmp_path):
    tarball = glob.glob(str(context / '_build' / 'collections' / '*.tar.gz'))[0]
    run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--offline', '--force', '-p',
         str(tmp_path / 'collections'),
         tarball])
    out = run([sys.executable, str(context / '_build' / 'scripts' / 'introspect.py'), 'introspect',
               '--write-pip', str(tmp_path / 'pip.txt'), '--write-bindep', str(tmp_path / 'bindep.txt'),
               str(tmp_path / 'collections')])
    assert 'ephemera.workspaces' in out
    pip = requirement_lines(str(tmp_path / 'pip.txt'))
    assert any(line.startswith('psycopg[binary]>=3.1') and 'ephemera.workspaces' in line for line in pip), pip
    assert any(line.startswith('paramiko>=3.2') for line in pip), pip
    system = requirement_lines(str(tmp_path / 'bindep.txt'))
    assert any(line.startswith('git ') for line in system) and any(line.startswith('openssh-client ') for line in system)
