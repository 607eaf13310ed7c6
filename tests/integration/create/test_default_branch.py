"""A request without a ref (left out, or blank as AWX sends an optional survey answer left empty: null or '')
checks out the repository's default branch, the one its HEAD names, through the shipped create playbook on the
try-out cluster: asked from the controller (git ls-remote --symref) where it can reach the repository, else taken
by the guest's clone and recorded by the checkout step. A later request for the same workspace without a ref, or
with that branch, is the same request.
"""

import os

import pytest

from .conftest import GIT_USER
from .createrun import request_vars
from .gitserver import git


@pytest.fixture(scope='module')
def trunk(repo):
    """A bare repository next to the served one whose HEAD names 'feature' (neither main nor master)."""
    bare = os.path.join(os.path.dirname(repo.bare), 'trunk.git')
    if not os.path.isdir(bare):
        git('clone', '--quiet', '--bare', repo.work, bare)
        git('--git-dir', bare, 'symbolic-ref', 'HEAD', 'refs/heads/feature')
    return bare


@pytest.fixture(scope='module')
def empty(repo):
    bare = os.path.join(os.path.dirname(repo.bare), 'empty.git')
    if not os.path.isdir(bare):
        git('init', '--quiet', '--bare', bare)
    return bare


def request(url, name, ref, **extra):
    """A create request whose ref is ``ref``, or has no ref at all when ``ref`` is ``...``."""
    out = request_vars(url, name, **extra)
    if ref is ...:
        del out['ref']
    else:
        out['ref'] = ref
    return out


def test_a_blank_ref_from_a_survey_checks_out_the_default_branch_asked_from_the_controller(
        controller, repo, trunk, git_server, git_token):
    name = 'blank-ref'
    login = {'git_token': git_token, 'git_username': GIT_USER}
    run = controller.create(request(git_server.url_of(trunk), name, None, **login))
    assert run.ok, run.explain()
    assert 'ref: feature, the default branch' in run.step_results()[1]['msg']
    ws = controller.workspace(name)
    assert (ws['status'], ws['ref'], ws['params']['ref']) == ('ready', 'feature', 'feature')
    assert ws['facts']['head'] == repo.feature_head and 'default_branch' not in ws['facts']
    checkout = os.path.join(controller.guest_root(ws['vmid']), ws['params']['checkout_path'].lstrip('/'))
    assert os.path.exists(os.path.join(checkout, 'farewell.py'))
    # The same request again, with the ref blank (the other answer AWX may send) or named: the same workspace.
    for again in ('', 'feature'):
        rerun = controller.create(request(git_server.url_of(trunk), name, again, **login))
        assert rerun.ok and not rerun.step_results()[1].get('changed'), rerun.explain()
    # Another branch is another request.
    other = controller.create(request(git_server.url_of(trunk), name, 'main', **login))
    assert not other.ok and "has checked out %s@feature already" % git_server.url_of(trunk) in \
        other.failure()[1]['msg'], other.explain()
    assert controller.ours(name) == [ws['vmid']]


def test_without_a_ref_the_guest_clone_takes_the_default_branch_where_only_it_can_ask(controller, repo, trunk):
    name = 'no-ref-file'
    run = controller.create(request('file://' + trunk, name, ...))
    assert run.ok, run.explain()
    assert 'ref: the default branch, which the checkout names' in run.step_results()[1]['msg']
    assert 'at feature (the default branch)' in run.step_results()[10]['msg']
    ws = controller.workspace(name)
    assert (ws['status'], ws['ref'], ws['facts']['default_branch']) == ('ready', None, 'feature')
    assert ws['facts']['head'] == repo.feature_head
    for again in ('feature',):
        rerun = controller.create(request('file://' + trunk, name, again))
        assert rerun.ok and not rerun.step_results()[1].get('changed'), rerun.explain()


def test_a_repository_with_no_default_branch_is_refused_before_anything(controller, empty, git_server, git_token):
    state = controller.cluster_state()
    run = controller.create(request(git_server.url_of(empty), 'no-branch', None, git_token=git_token,
                                    git_username=GIT_USER))
    assert not run.ok and run.failure()[0] == 'Check the request for no-branch', run.explain()
    assert 'has no default branch' in run.failure()[1]['msg'] and 'give ref' in run.failure()[1]['msg']
    assert controller.workspace('no-branch') is None and controller.queue_entries('no-branch') == []
    assert controller.cluster_state() == state
