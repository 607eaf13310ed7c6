"""Twenty workspaces in one run (forks 10) while another user of the cluster takes the VMIDs they are about to use;
at the end of their short lease, one expiry sweep releases all twenty, up to its ``parallel`` (8) at once.

The run's inventory has one host per workspace, each run on the controller itself (connection
local) with its ``workspace`` as a host variable; the create playbook targets that group. This is
how a batch of workspaces is made in one job (docs/create.md).
"""

import json
import os
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership

from .createrun import WORKING_AGENT

COUNT = 20
# Long enough for the twenty to be made on a loaded machine before it ends (a lease that ended first would only
# make the sweep's wait shorter).
TTL = 60
PARALLEL = 8
EXPIRE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                      'playbooks', 'expire.yml')


def inventory(path, names):
    hosts = {name: {'workspace': name} for name in names}
    data = {'workspaces': {'hosts': hosts, 'vars': {'ansible_connection': 'local',
                                                    'ansible_python_interpreter': '{{ ansible_playbook_python }}'}}}
    with open(path, 'w') as out:
        json.dump(data, out)
    return path


def test_twenty_workspaces_in_one_run_while_a_foreign_client_grabs_vmids(controller, repo, tmp_path):
    cluster = controller.cluster
    pool = controller.info['pool']
    names = ['many-%02d' % n for n in range(1, COUNT + 1)]
    # Another user's containers: one in our pool named like one of ours, one outside it.
    look_alike = cluster.foreign_create(pool=pool, hostname='agent-many-05', start=True)['vmid']
    outside = cluster.foreign_create(how='create')['vmid']
    foreign = {vmid: controller.config(vmid) for vmid in (look_alike, outside)}
    # ... and, during the run, the VMIDs /cluster/nextid offers us and those our clones are about to take.
    arms = [cluster.foreign_snipe(on='nextid', times=3), cluster.foreign_snipe(on='clone', times=3)]

    run = controller.create({'repo': repo.url, 'purpose': 'Add a farewell next to greet', 'agent': 'worker',
                             'ephemera_agents': {'worker': WORKING_AGENT}, 'ttl': TTL},
                            inventory=inventory(str(tmp_path / 'workspaces.json'), names), target='workspaces',
                            forks=10, timeout=900)
    assert run.ok, run.explain()
    assert all(run.stats(name)['failures'] == 0 for name in names)

    records = {name: controller.workspace(name) for name in names}
    assert all(ws['status'] == 'ready' for ws in records.values()), records
    vmids = [ws['vmid'] for ws in records.values()]
    assert len(set(vmids)) == COUNT
    for name, ws in records.items():
        assert controller.ours(name) == [ws['vmid']]

    # The foreign containers are untouched, and none was taken for a workspace.
    sniped = [hit['vmid'] for arm in cluster.status()['foreign']['snipes'] for hit in arm['hits']]
    assert len(sniped) == 6 and not set(sniped) & set(vmids), (arms, sniped)
    assert {vmid: controller.config(vmid) for vmid in foreign} == foreign
    secret = controller.secret()
    for vmid in sniped:
        config = controller.config(vmid)
        assert config['hostname'] == 'claimed-%d' % vmid
        assert ownership.verify(config.get('description'), secret, ownership.controller_id(secret)) == ownership.ABSENT
    assert look_alike not in vmids and outside not in vmids
    # Each workspace that met a taken VMID moved on to another candidate, as its events say.
    moved = [e for name in names for e in controller.events(name) if e['action'] == 'candidate_vmid'
             and e['detail'].get('why')]
    assert set(e['detail']['old'] for e in moved) >= set(sniped)

    # The leases end (a working agent's activity never moves one past its ttl); one sweep releases all twenty.
    time.sleep(max(0.0, max(ws['lease']['expires_at'] for ws in records.values()) - time.time()) + 0.5)
    swept = controller.create({'limit': COUNT, 'parallel': PARALLEL}, playbook=EXPIRE)
    assert swept.ok, swept.explain()
    released = [e['workspace'] for e in swept.task('Release what expired')['entries'] if e['action'] == 'released']
    assert sorted(released) == names
    assert all(controller.workspace(name)['status'] == 'destroyed' and controller.ours(name) == [] for name in names)
    assert not set(vmids) & set(controller.guests())
    # Each release runs from its claim (the 'expired' event) to its outcome ('cleanup_completed'); in journal order
    # several were under way at once, never more than the sweep's parallel.
    marks = []
    for name in names:
        events = controller.events(name)
        marks.append((min(e['id'] for e in events if e['action'] == 'expired'), 1))
        marks.append((max(e['id'] for e in events if e['action'] == 'cleanup_completed'), -1))
    running = [sum(step for at, step in sorted(marks)[:upto]) for upto in range(1, len(marks) + 1)]
    assert 2 <= max(running) <= PARALLEL, running
