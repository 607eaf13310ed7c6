"""An AWX project that points at this repository: AWX checks the repository out, installs what
collections/requirements.yml names (``ansible-galaxy collection install -r collections/requirements.yml`` in the
project's directory, into the job's requirements_collections) and runs a playbook of the project with that path. The
project is a copy of the files git tracks; the collection is installed offline; nothing of the venv's link to the
checkout or of ~/.ansible is searched (an empty HOME, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=0)."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)


def run(command, cwd, env):
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env,
                          timeout=300, check=False)


@pytest.fixture(scope='module')
def job(tmp_path_factory):
    """A job directory as AWX lays it out: project/ (the tracked files) and requirements_collections/."""
    top = tmp_path_factory.mktemp('awx-job')
    project = top / 'project'
    tracked = subprocess.run(['git', '-C', ROOT, 'ls-files', '-z'], stdout=subprocess.PIPE, check=True).stdout
    for name in tracked.decode().split('\0'):
        if name and os.path.isfile(os.path.join(ROOT, name)):
            target = project / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), str(target))
    home = top / 'home'
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith('ANSIBLE_')}
    env.update(HOME=str(home), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='0', ANSIBLE_NOCOLOR='1',
               PATH=BIN + os.pathsep + env.get('PATH', ''))
    return dict(top=top, project=project, env=env)


def syntax_check(job, collections):
    env = dict(job['env'], ANSIBLE_COLLECTIONS_PATH=str(collections))
    return run([os.path.join(BIN, 'ansible-playbook'), '--syntax-check', 'playbooks/create.yml',
                'playbooks/destroy.yml'], cwd=str(job['project']), env=env)


def test_without_the_requirements_the_role_is_not_found(job):
    empty = job['top'] / 'nothing'
    empty.mkdir()
    done = syntax_check(job, empty)
    assert done.returncode != 0
    assert "the role 'ephemera.workspaces.workspace_create' was not found" in done.stdout, done.stdout


def test_the_requirements_install_the_collection_from_the_project_and_its_roles_resolve(job):
    collections = job['top'] / 'requirements_collections'
    install = run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--offline', '-r',
                   'collections/requirements.yml', '-p', str(collections)], cwd=str(job['project']), env=job['env'])
    assert install.returncode == 0, install.stdout
    installed = collections / 'ansible_collections' / 'ephemera' / 'workspaces'
    assert (installed / 'MANIFEST.json').is_file() and (installed / 'roles' / 'workspace_create').is_dir()
    # Installed from the project's own files: the same role as the checkout's.
    assert (installed / 'roles' / 'workspace_create' / 'tasks' / 'main.yml').read_text() == open(
        os.path.join(ROOT, 'roles', 'workspace_create', 'tasks', 'main.yml')).read()
    done = syntax_check(job, collections)
    assert done.returncode == 0, done.stdout
    assert 'playbook: playbooks/create.yml' in done.stdout and 'playbook: playbooks/destroy.yml' in done.stdout
