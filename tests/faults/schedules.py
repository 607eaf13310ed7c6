"""Seeded random fault schedules: the matrix's faults mixed, over a few workspaces created at once and then
destroyed at once.

A schedule is made from its seed alone (``generate``), so a failing seed runs again exactly as it
did: ``python -m tests.faults replay --seed N``. What it holds, per workspace: a kill point for its
create run and one for its destroy run (or none), and whether the first run after a fault is
reconcile; for the whole schedule: lost responses, delayed answers, the template
locked by another task, guests whose SSH is refused for a while or whose sessions are cut.
"""

import random

from tests.faults.cells import MAX_RERUNS, status_of
from tests.faults.site import Kill

LOSABLE = (('POST', '/nodes/*/lxc/*/clone'), ('PUT', '/nodes/*/lxc/*/config'), ('POST', '/nodes/*/lxc/*/status/start'),
           ('POST', '/nodes/*/lxc/*/status/shutdown'), ('DELETE', '/nodes/*/lxc/*'))
DELAYABLE = LOSABLE + (('GET', '/nodes/*/lxc/*/status/current'), ('GET', '/nodes/*/tasks/*/status'),
                       ('GET', '/nodes/*/lxc/*/interfaces'), ('GET', '/cluster/nextid'))
CUTTABLE = ('git clone', 'agent_runner', 'sh -s')


def generate(seed, create_points, destroy_points, cluster_faults=True):
    """The schedule of ``seed``: a dict that says everything the run will do. ``cluster_faults`` False: the kills
    and reconciles only, none of the try-out cluster's faults (a try-out cloud's schedules: its answers are lost in
    the matrix's rows)."""
    rng = random.Random(seed)
    workspaces = []
    for dummy in range(rng.randint(2, 3)):
        create_kill = rng.choice(create_points) if rng.random() < 0.6 else None
        destroy_kill = rng.choice(destroy_points) if rng.random() < 0.5 else None
        workspaces.append({'create_kill': list(create_kill) if create_kill else None,
                           'destroy_kill': list(destroy_kill) if destroy_kill else None,
                           'reconcile_first': rng.random() < 0.3})
    faults = []
    if not cluster_faults:
        return {'seed': seed, 'workspaces': workspaces, 'faults': faults}
    if rng.random() < 0.4:
        method, path = rng.choice(LOSABLE)
        faults.append({'kind': 'drop-response', 'method': method, 'path': path, 'times': 1})
    if rng.random() < 0.5:
        method, path = rng.choice(DELAYABLE)
        faults.append({'kind': 'delay', 'method': method, 'path': path, 'times': rng.randint(1, 5),
                       'seconds': round(rng.uniform(0.05, 0.6), 2)})
    if rng.random() < 0.3:
        faults.append({'kind': 'template-lock', 'seconds': round(rng.uniform(0.5, 2.0), 1)})
    if rng.random() < 0.3:
        faults.append({'kind': 'ssh-refused', 'seconds': round(rng.uniform(0.5, 3.0), 1)})
    if rng.random() < 0.25:
        faults.append({'kind': 'ssh-cut', 'match': rng.choice(CUTTABLE)})
    return {'seed': seed, 'workspaces': workspaces, 'faults': faults}


def arm(site, faults):
    control = site.cluster
    for fault in faults:
        if fault['kind'] in ('drop-response', 'delay'):
            control.proxy_add(fault['kind'], fault['method'], fault['path'], times=fault['times'],
                              seconds=fault.get('seconds'))
        elif fault['kind'] == 'template-lock':
            control.pve_hold_lock(site.info['template_vmid'], fault['seconds'])
        elif fault['kind'] == 'ssh-refused':
            control.guest_fault('refuse', seconds=fault['seconds'], times=1)
        elif fault['kind'] == 'ssh-cut':
            control.guest_fault('drop', match=fault['match'], times=1)
    site.log_requests()


def _phase(matrix, cell, plan, op, kill_key):
    """Every workspace's run of ``op`` at once, each killed where the schedule says; then converge each: to ready
    after a create, destroyed after a destroy, or what the place's rule makes of a kill that hit its point
    (``matrix.kill_ends``: on Azure, a create killed right after a PUT was recorded ends failed)."""
    site = matrix.site
    make_op = site.create_op if op == 'create' else site.destroy_op
    handles = []
    for name, spec in plan:
        kill = Kill(name, spec[kill_key][0], spec[kill_key][1]) if spec[kill_key] else None
        handles.append(site.start_run([make_op(name)], kill=kill))
    killed = [site.finish(handle).killed for handle in handles]
    for (name, spec), was_killed in zip(plan, killed):
        wanted = matrix.kill_ends(op, spec[kill_key][0] if was_killed else None)
        runs = 0
        while status_of(site, name) != wanted and runs < MAX_RERUNS:
            runs += 1
            first = spec['reconcile_first'] and runs == 1
            outcome = site.run([site.reconcile_op() if first else make_op(name)])
            if not outcome.ok and status_of(site, name) != wanted:
                cell.notes.append('%s %s run %d: %s' % (op, name, runs, outcome.explain()[:160]))
        cell.reruns = max(cell.reruns, runs)
        if status_of(site, name) != wanted:
            now = status_of(site, name)
            cell.notes.append('%s is %s after %s and %d runs, not %s' % (name, now, op, runs, wanted))
            return False
    return True


def execute(matrix, cell, schedule):
    site = matrix.site
    names = [matrix.name('s') for dummy in schedule['workspaces']]
    cell.names.extend(names)
    plan = list(zip(names, schedule['workspaces']))
    arm(site, schedule['faults'])
    converged = _phase(matrix, cell, plan, 'create', 'create_kill')
    if converged:
        converged = _phase(matrix, cell, plan, 'destroy', 'destroy_kill')
    cell.converged = converged
