"""A typo in the repository or ref costs no container: a request that corrects them for a workspace that has not
checked out yet is taken (the checkout, and whatever failed before it, runs with the corrected one, in the same
container), through the shipped create playbook on the try-out cluster. Once the workspace checked out, another
repository is refused with the command to run.

The repository here is a file:// URL, which only the guest's clone can use: the controller's request check cannot
ask it, so the typo is found at the checkout step (an https repository the controller reaches is checked at the
request, before anything is made: test_rerun_and_report.py, test_default_branch.py).
"""

import os

from .createrun import request_vars


def test_a_request_that_corrects_the_repository_after_a_failed_checkout_goes_on_in_the_same_container(
        controller, repo):
    name = 'typo-repo'
    typo = 'file://' + repo.bare + '-typo'
    run = controller.create(request_vars(typo, name, purpose='Add a farewell'))
    assert not run.ok
    ws = controller.workspace(name)
    assert ws['failure']['step'] == 'checkout', ws['failure']
    vmid = ws['vmid']
    # The corrected request: recorded by the request step, the checkout runs with it, the workspace gets ready.
    fixed = controller.create(request_vars('file://' + repo.bare, name, purpose='Add a farewell'))
    assert fixed.ok, fixed.explain()
    said = fixed.step_results()[1]['msg']
    assert "corrected repo 'file://%s'" % repo.bare in said and "(was repo %r)" % typo in said, said
    ws = controller.workspace(name)
    expected = ('ready', 'file://' + repo.bare, 'file://' + repo.bare, vmid)
    assert (ws['status'], ws['repo'], ws['params']['repo'], ws['vmid']) == expected
    assert controller.ours(name) == [vmid]
    checkout = os.path.join(controller.guest_root(vmid), ws['params']['checkout_path'].lstrip('/'))
    assert os.path.exists(os.path.join(checkout, 'greet.py'))
    [corrected] = [e for e in controller.events(name) if e['action'] == 'corrected']
    assert corrected['detail'] == {'changed': ['repo'], 'was': {'repo': typo}}
    # Checked out now: another repository is another workspace, and the message says what to run.
    again = controller.create(request_vars(typo, name, purpose='Add a farewell'))
    assert not again.ok
    message = again.failure()[1]['msg']
    assert ("Workspace '%s' has checked out file://%s@" % (name, repo.bare)) in message, message
    assert 'ansible-playbook ephemera.workspaces.destroy -e workspace=%s' % name in message
    assert controller.workspace(name)['generation'] == ws['generation']


def test_a_corrected_ref_before_the_checkout_is_taken_and_checked_where_the_controller_can(controller, repo):
    name = 'typo-ref'
    url = 'file://' + repo.bare
    run = controller.create(dict(request_vars(url, name, purpose='Add a farewell'), ref='mian'))
    assert not run.ok and controller.workspace(name)['failure']['step'] == 'checkout'
    fixed = controller.create(dict(request_vars(url, name, purpose='Add a farewell'), ref='main'))
    assert fixed.ok, fixed.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['ref'], ws['facts']['head']) == ('ready', 'main', repo.main_head)
