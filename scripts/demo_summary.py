# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demo's summary of one workspace, from the journal: a few readable lines, the same for every provider.

    python scripts/demo_summary.py WORKSPACE INVENTORY     (EPHEMERA_JOURNAL names the journal)

It shows the status, the provider's resource, the address and the SSH command to reach it, the repository, the agent,
the lease, and the command that destroys it: never the record's JSON.
"""

import os
import shlex
import sys
import time

# The places' state and the journal: a destroy run by hand needs the same to find the workspace.
PLACE_ENV = ('LOCALPVE_STATE_DIR', 'LOCALCLOUD_STATE_DIR', 'EPHEMERA_JOURNAL')


def summary(ws, inventory, journal_path, environ=None):
    """The summary's lines for the workspace record ``ws`` (as ``Journal.get_workspace`` gives it); the destroy
    command carries the variables of ``environ`` (os.environ) that say where the place and the journal are."""
    environ = os.environ if environ is None else environ
    where = ''.join('%s=%s ' % (name, shlex.quote(environ[name])) for name in PLACE_ENV if environ.get(name))
    params, facts = ws.get('params') or {}, ws.get('facts') or {}
    agent = facts.get('agent') or {}
    expires = (ws.get('lease') or {}).get('expires_at')
    # The command the create's report prints: its key, pinned to the recorded host key; before a key is recorded,
    # the plain form.
    from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.pinning import ssh_command
    ssh = ssh_command(ws) or 'ssh -i %s -p %s %s@%s' % (
        params.get('ssh_key_path') or params.get('ssh_private_key') or '<key>', params.get('ssh_port') or 22,
        params.get('ssh_user') or 'root', ws.get('address') or '<address>')
    rows = [
        ('workspace', ws['name']),
        ('status', '%s, activity %s' % (ws.get('status'), ws.get('activity'))),
        ('provider', '%s %s in %s' % (ws.get('provider') or 'proxmox', ws.get('resource_id') or ws.get('vmid'),
                                      ws.get('location') or ws.get('node'))),
        ('address', ws.get('address') or '(none yet)'),
        ('ssh', ssh),
        ('repository', '%s at %s (%s)' % (ws.get('repo'), ws.get('ref') or 'its default branch',
                                          (facts.get('head') or '?')[:12])),
        ('agent', '%s, %s brief(s), %s' % (params.get('agent'), agent.get('briefs', '?'),
                                           'running' if agent.get('running') else 'not running')),
        ('lease', 'expires %s' % (time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(expires)) if expires
                                  else 'never')),
        ('destroy', '%sansible-playbook -i %s playbooks/destroy.yml -e workspace=%s' % (where, inventory, ws['name'])),
        ('journal', journal_path),
    ]
    return ['  %-11s %s' % (key, value) for key, value in rows]


def main(argv):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal

    name, inventory = argv[1], argv[2]
    with Journal.open(readonly=True) as journal:
        ws = journal.get_workspace(name)
        if ws is None:
            sys.exit('The journal %s has no workspace %s.' % (journal.path, name))
        print('\n'.join(summary(ws, inventory, journal.path)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
