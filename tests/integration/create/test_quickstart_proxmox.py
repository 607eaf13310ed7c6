"""docs/quickstart-proxmox.md, step 1, is what a controller needs on a real cluster: the pveum commands of its first
code block are applied to the try-out cluster (its API checks every privilege of every user but root@pam as
Proxmox VE does, from the first grant on), and a create, a status and a destroy run through the shipped playbooks
with the token they make, holding exactly that role on exactly those paths. A token that lacks Pool.Audit is told
at the request, before anything is made.
"""

import os
import re
import secrets
import shlex

import pytest

from tests.ansible_run import ROOT, run_ansible

from .createrun import DESTROY, Controller, request_vars

DOC = os.path.join(ROOT, 'docs', 'quickstart-proxmox.md')
STATUS = os.path.join(ROOT, 'playbooks', 'status.yml')


def access_commands():
    """The shell lines of the doc's step 1 (its first ``sh`` block), variables substituted later."""
    with open(DOC, encoding='utf-8') as handle:
        text = handle.read()
    step = text[text.index('## 1.'):text.index('## 2.')]
    return re.search(r'```sh\n(.*?)\n```', step, re.S).group(1).splitlines()


def apply(lines, values):
    """What the pveum commands set up: (the token id, ACL grants [principal, path, privileges])."""
    roles, token, grants = {}, None, []
    for line in lines:
        words = shlex.split(line)
        if all('=' in word for word in words):
            assert set(dict(word.split('=', 1) for word in words)) == set(values), line
            continue
        words = [re.sub(r'\$(\w+)', lambda m: str(values[m.group(1)]), word) for word in words]
        assert words[0] == 'pveum', line
        rest = words[1:]
        if rest[:2] == ['role', 'add']:
            privs = rest[rest.index('--privs') + 1]
            roles[rest[2]] = [p for p in re.split(r'[,\s]+', privs) if p]
        elif rest[:3] == ['user', 'token', 'add']:
            assert rest[rest.index('--privsep') + 1] == '1', 'the token must have privilege separation'
            token = '%s!%s' % (rest[3], rest[4])
        elif rest[:2] == ['acl', 'modify']:
            path = rest[2]
            role = rest[rest.index('--roles') + 1]
            for flag in ('--users', '--tokens'):
                if flag in rest:
                    for principal in rest[rest.index(flag) + 1].split(','):
                        grants.append([principal, path, roles[role]])
        else:
            assert rest[:2] in (['pool', 'add'], ['user', 'add']), line
    return token, grants


@pytest.fixture(scope='module')
def restricted(cluster, tmp_path_factory):
    """A controller whose token holds exactly what the quick start grants (applied once to the shared cluster:
    root@pam, which every other test uses, is not affected)."""
    info = cluster.info
    values = {'POOL': info['pool'], 'SEED': info['template_vmid'], 'STORAGE': info['storage'],
              'BRIDGE': info['bridge']}
    token, grants = apply(access_commands(), values)
    secret = secrets.token_hex(16)
    # Step 2 puts the seed into the pool (pct create --pool); the try-out cluster's template stands for it.
    cluster.pve_access(token_id=token, token_secret=secret, grants=grants, pool=info['pool'],
                       pool_vms=[info['template_vmid']])
    ctl = Controller(cluster, tmp_path_factory.mktemp('quickstart'))
    ctl.login = {'ephemera_api_user': token.split('!')[0], 'ephemera_api_token_id': token,
                 'ephemera_api_token_secret': secret}
    ctl.role = grants[0][2]
    try:
        yield ctl
    finally:
        ctl.stop()


def test_the_role_names_privileges_proxmox_knows_and_the_table_explains_each(restricted):
    with open(DOC, encoding='utf-8') as handle:
        table = handle.read().split('| privilege | on | for |', 1)[1].split('\n\n', 1)[0]
    explained = set(re.findall(r'`([A-Z][A-Za-z]+\.[A-Za-z.]+)`', table))
    assert explained == set(restricted.role), explained ^ set(restricted.role)
    assert 'Sys.Audit' not in restricted.role and 'Permissions.Modify' not in restricted.role


def test_a_workspace_is_created_listed_and_destroyed_with_exactly_the_documented_privileges(restricted, repo):
    name = 'quickstart'
    run = restricted.create(dict(request_vars(repo.url, name), **restricted.login))
    assert run.ok, run.explain()
    ws = restricted.workspace(name)
    assert ws['status'] == 'ready'
    status = run_ansible(['ansible-playbook', '-i', os.path.join(ROOT, 'inventories', 'localpve'), STATUS, '-e',
                          'status_ask_agents=false'],
                         env={'LOCALPVE_STATE_DIR': restricted.info['state_dir'],
                              'EPHEMERA_JOURNAL': restricted.journal_path}, timeout=300)
    assert status.ok, status.explain()
    destroyed = restricted.start(dict({'workspace': name}, **restricted.login), playbook=DESTROY).wait(300)
    assert destroyed.ok, destroyed.explain()
    assert restricted.workspace(name)['status'] == 'destroyed' and restricted.ours(name) == []


def test_a_token_without_pool_audit_is_told_at_the_request_and_nothing_is_made(restricted, cluster, repo):
    info = cluster.info
    # A user of its own: the try-out API adds a token's and its user's grants up (PVE intersects them).
    token, secret = 'nopool@pve!workspaces', secrets.token_hex(16)
    cluster.pve_access(token_id=token, token_secret=secret, grants=[
        [token, '/pool/' + info['pool'], [p for p in restricted.role if p != 'Pool.Audit']]])
    state = restricted.cluster_state()
    run = restricted.create(dict(request_vars(repo.url, 'no-pool-audit'), ephemera_api_user='nopool@pve',
                                 ephemera_api_token_id=token, ephemera_api_token_secret=secret))
    assert not run.ok and run.failure()[0] == 'Check the request for no-pool-audit', run.explain()
    assert info['pool'] in run.failure()[1]['msg']
    assert restricted.workspace('no-pool-audit') is None and restricted.cluster_state() == state
