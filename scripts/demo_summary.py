# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demo's summary of one workspace, from the journal: a few readable lines, the same for every provider.

    python scripts/demo_summary.py WORKSPACE INVENTORY     (EPHEMERA_JOURNAL names the journal)

It shows the status, the provider's resource, the address and the SSH command to reach it, the repository, the agent,
the lease, and the command that destroys it: never the record's JSON.
"""

import sys
import time


def summary(ws, inventory, journal_path):
    """The summary's lines for the workspace record ``ws`` (as ``Journal.get_workspace`` gives it)."""
    params, facts = ws.get('params') or {}, ws.get('facts') or {}
    agent = facts.get('agent') or {}
    expires = (ws.get('lease') or {}).get('expires_at')
    ssh = 'ssh -i %s -p %s %s@%s' % (params.get('ssh_private_key') or '<key>', params.get('ssh_port') or 22,
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
        ('destroy', 'ansible-playbook -i %s playbooks/destroy.yml -e workspace=%s' % (inventory, ws['name'])),
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
