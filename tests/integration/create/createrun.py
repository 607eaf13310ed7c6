"""Running the create playbook for real and reading what it left: the journal, the cluster, the guests.

One ``Controller`` is one journal (and so one controller id and secret) working against a shared
try-out cluster. Its runs are real ``ansible-playbook`` processes with the localpve inventory; their
extra vars go through a file, so that no secret ever sits on a command line.
"""

import json
import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from tests import ansible_run
from tests.ansible_run import Run
from tests.localpve import proxmox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOK = os.path.join(ROOT, 'playbooks', 'create.yml')
DESTROY = os.path.join(ROOT, 'playbooks', 'destroy.yml')
INVENTORY = os.path.join(ROOT, 'inventories', 'localpve')
# An agent that works until it is stopped: the workspace stays "active".
WORKING_AGENT = ['sh', '-c', 'sleep 300']


class CreateRun(Run):
    """A create (or destroy) playbook run, read by its numbered steps."""

    def step_results(self, host='localhost'):
        """{step number: result} of the thirteen create steps that ran (skipped ones included)."""
        return {int(name.split('/', 1)[0]): result for name, result in self.results(host)
                if name[:1].isdigit() and '/13 ' in name}

    def report(self, host='localhost'):
        for name, result in self.results(host):
            if name.startswith('Report '):
                return result['msg']
        return None


class Controller:
    """A journal and the runs that use it, against one cluster."""

    def __init__(self, cluster, workdir):
        self.cluster = cluster
        self.info = cluster.info
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.journal_path = os.path.join(self.workdir, 'journal.sqlite')
        self.runs = []
        self._api = None

    # ---------------------------------------------------------------- runs

    def start(self, extra_vars, check=False, inventory=None, target=None, forks=None, callback='json', verbose=0,
              env=None, playbook=PLAYBOOK):
        """Start the create playbook (or another) with ``extra_vars`` (given through a file); returns the Run."""
        vars_path = os.path.join(self.workdir, 'vars-%d.json' % len(self.runs))
        with open(vars_path, 'w') as out:
            json.dump(dict(extra_vars, **({'target': target} if target else {})), out)
        cmd = ['ansible-playbook', '-i', INVENTORY]
        if inventory:
            cmd += ['-i', inventory]
        cmd += [playbook, '-e', '@' + vars_path]
        if check:
            cmd.append('--check')
        if forks:
            cmd += ['--forks', str(forks)]
        if verbose:
            cmd.append('-' + 'v' * verbose)
        run = CreateRun.start(cmd, env=dict(env or {}, LOCALPVE_STATE_DIR=self.info['state_dir'],
                                            EPHEMERA_JOURNAL=self.journal_path),
                              callback=ansible_run.JSON_CALLBACK if callback == 'json' else None)
        self.runs.append(run)
        return run

    def create(self, extra_vars, timeout=300, **options):
        """Run the create playbook to its end; returns the finished Run."""
        return self.start(extra_vars, **options).wait(timeout)

    def stop(self):
        for run in self.runs:
            run.kill()

    # ------------------------------------------------------------- journal

    def journal(self):
        return Journal.open(self.journal_path, create=False)

    def queue_entries(self, name):
        """The queue entries of workspace ``name``, oldest first (none while there is no journal)."""
        try:
            journal = self.journal()
        except JournalMissing:
            return []
        with journal:
            return sorted(Queue(journal).entries(target=name, target_type='workspace', recent=100),
                          key=lambda entry: entry['id'])

    def workspace(self, name):
        """The workspace's record, or None (also while no run has made the journal yet)."""
        try:
            journal = self.journal()
        except JournalMissing:
            return None
        with journal:
            return journal.get_workspace(name)

    def events(self, name):
        with self.journal() as journal:
            return journal.events(name)

    def journal_dump(self):
        """Every table's rows, as text, in a stable order: equal dumps mean an unchanged journal."""
        with self.journal() as journal:
            return '\n'.join(journal._conn.iterdump())  # pylint: disable=protected-access

    def journal_bytes(self):
        """The bytes of the journal's files (database, WAL), for grepping."""
        data = b''
        for suffix in ('', '-wal', '-shm'):
            path = self.journal_path + suffix
            if os.path.exists(path):
                with open(path, 'rb') as src:
                    data += src.read()
        return data

    def secret(self):
        return ownership.load_secret(self.journal_path)

    def controller_id(self):
        return ownership.controller_id(self.secret())

    # ------------------------------------------------------------- cluster

    @property
    def api(self):
        """The API itself (not through the fault proxy), as an operator's console sees it."""
        if self._api is None:
            self._api = proxmox(self.info, via='api')
        return self._api

    def guests(self):
        """{vmid: /cluster/resources entry} of every container that is not a template."""
        return {int(g['vmid']): g for g in self.api.cluster.resources.get(type='vm') if not g.get('template')}

    def config(self, vmid, node=None):
        return self.api.nodes(node or self.info['template_node']).lxc(vmid).config.get()

    def cluster_state(self):
        """What a change to the cluster would alter: every container's status and config."""
        return {vmid: (g['status'], g.get('pool'), self.config(vmid, g['node']))
                for vmid, g in self.guests().items()}

    def marker_verdict(self, vmid, name):
        return ownership.verify(self.config(vmid).get('description'), self.secret(), self.controller_id(), name, vmid)

    def ours(self, name):
        """VMIDs of the containers whose marker verifies for workspace ``name`` of this controller."""
        return sorted(vmid for vmid, g in self.guests().items()
                      if ownership.verify(self.config(vmid, g['node']).get('description'), self.secret(),
                                          self.controller_id(), name, vmid) == ownership.VERIFIED)

    def guest_root(self, vmid):
        return self.info['guest_root'].replace('{vmid}', str(vmid))


def request_vars(repo_url, name, **extra):
    """The extra vars of a create request for workspace ``name``; ``extra`` adds or overrides."""
    out = {'workspace': name, 'repo': repo_url, 'ref': 'main', 'purpose': 'Add a farewell next to greet',
           'agent': 'worker', 'ephemera_agents': {'worker': WORKING_AGENT}}
    out.update(extra)
    return out


def files_containing(top, needle):
    """Paths of the files under ``top`` whose bytes contain ``needle``."""
    needle = needle.encode() if isinstance(needle, str) else needle
    found = []
    for base, dirs, names in os.walk(top):
        for name in names:
            path = os.path.join(base, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, 'rb') as src:
                    if needle in src.read():
                        found.append(path)
            except OSError:
                continue
    return sorted(found)


def process_lists_containing(needle):
    """Command lines of this machine's processes that contain ``needle`` (the guests are this machine's)."""
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as src:
                argv = src.read()
        except OSError:
            continue
        if needle.encode() in argv:
            found.append((int(pid), argv.replace(b'\0', b' ').decode('utf-8', 'replace')))
    return found
