#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_archive
short_description: Archive a workspace's work, or tell whether it holds work that was never saved
version_added: 0.1.0
description:
  - With O(mode=archive), saves what the workspace's checkout holds and a remote does not. When O(push) is on and the
    remote accepts it, a commit of everything in the checkout (HEAD as parent; uncommitted changes and untracked files
    that are not ignored) goes to the workspace's own branch C(<push_prefix><name>). Otherwise, or when the remote
    refuses the push, a git bundle of the commits no remote has, binary patches of the tracked changes and of the
    index, and (with O(include_untracked)) a tar of untracked files are copied to the controller.
  - Every archive writes C(metadata.json) (branch, HEAD, what was captured, how to restore it, the journal's record
    and event log, the agent runner's status) into C(<archive_dir>/<name>/<UTC timestamp>/). Files are written
    durably (temporary file, fsync, rename, fsync of the directory), mode 0600 in directories of mode 0700.
  - The checkout's working tree, index and refs are never changed. The agent's credentials file and the checkout's
    C(.git) directory are never copied; a remote URL is stored without its password or token.
  - The journal records the archive (C(facts.archive)) with a digest of the checkout's state. Archiving a state that
    was archived already changes nothing.
  - With O(mode=check), only reports whether the workspace holds unsaved work (RV(unsaved)), writing nothing. A
    workspace without a checkout holds nothing; one whose guest cannot be reached while it has a checkout is
    C(unknown), which counts as unsaved.
  - A workspace being destroyed is archived only by its destruction (O(claim) of its V(destroy) operation).
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
extends_documentation_fragment:
  - ephemera.workspaces.archive
  - ephemera.workspaces.journal
  - ephemera.workspaces.history
attributes:
  check_mode:
    support: full
    description: Inspects the checkout and reports whether it would archive; pushes nothing and writes no file.
  diff_mode:
    support: none
    description: Not supported.
options:
  name:
    description: The workspace's name.
    type: str
    required: true
  mode:
    description:
      - V(archive) saves the work; V(check) only reports whether there is unsaved work.
    type: str
    choices: [archive, check]
    default: archive
  claim:
    description:
      - The queue claim under which this run works on the workspace, as returned by M(ephemera.workspaces.queue).
        Every journal write carries it; a run that lost its claim writes nothing.
    type: dict
'''

EXAMPLES = r'''
- name: Archive a workspace (push to ephemera/fix-login, or bundle and patches)
  ephemera.workspaces.workspace_archive:
    name: fix-login
    include_untracked: ['*.md']
  register: archived

- name: Refuse to go on while the workspace holds unsaved work
  ephemera.workspaces.workspace_archive:
    name: fix-login
    mode: check
  register: saved
  failed_when: saved.unsaved
'''

RETURN = r'''
msg:
  description: What was found or done, in one line.
  returned: always
  type: str
  sample: "archived fix-login: pushed 3f2a9c01b2e4 to refs/heads/ephemera/fix-login; metadata.json in /srv/archives/..."
verdict:
  description:
    - V(nothing) (no checkout, destroyed, or everything is on a remote), V(saved) (this state was archived or pushed),
      V(unsaved) (work that exists only in the workspace), or V(unknown) (a checkout that cannot be inspected).
  returned: always
  type: str
unsaved:
  description: True when the verdict is V(unsaved) or V(unknown).
  returned: always
  type: bool
state:
  description: The checkout as inspected; null when it was not inspected.
  returned: always
  type: dict
  contains:
    branch:
      description: The branch checked out, or null when HEAD is detached.
      type: str
    head:
      description: The commit HEAD points at.
      type: str
    upstream:
      description: The branch's upstream (for example C(origin/main)), or null.
      type: str
    base:
      description: The newest commit on HEAD's first-parent line that a remote has.
      type: str
    unpushed_commits:
      description: Commits of HEAD, the local branches and the stash that no remote-tracking ref reaches.
      type: int
    tracked_changes:
      description: Tracked files differ from HEAD on disk.
      type: bool
    staged_changes:
      description: The index differs from HEAD.
      type: bool
    untracked_files:
      description: Untracked files that are not ignored.
      type: int
    digest:
      description: Digest of the whole state (HEAD, branches, index, files); equal digests mean nothing changed.
      type: str
archive:
  description: The archive made now, or the last one recorded; null when there is none.
  returned: always
  type: dict
  contains:
    path:
      description: The archive's directory on the controller.
      type: str
    files:
      description: The files in it (C(head.bundle), C(worktree.patch), C(index.patch), C(untracked.tar), C(metadata.json)).
      type: list
      elements: str
    head:
      description: HEAD when it was archived.
      type: str
    branch:
      description: The branch when it was archived.
      type: str
    pushed_ref:
      description: The ref the work was pushed to, or null when nothing was pushed.
      type: str
    pushed_commit:
      description: The commit pushed to RV(archive.pushed_ref), or null.
      type: str
    at:
      description: When it was archived (ISO 8601, UTC).
      type: str
    digest:
      description: The state digest it archived.
      type: str
push:
  description: With O(mode=archive) when an archive was made, what the push did (attempted, ok, remote, ref, commit, error,
    skipped).
  returned: always
  type: dict
archive_dir:
  description: The archive directory used.
  returned: always
  type: str
notes:
  description: Things worth knowing, for example why a push fell back to a bundle and patches.
  returned: always
  type: list
  elements: str
# BEGIN failure_facts.GUEST: written by scripts/module_docs.py from plugins/doc_fragments/failure_facts.py
address:
  description: The address of the guest that SSH failed on.
  returned: failure, when SSH to the guest failed
  type: str
  sample: 192.0.2.15
attempts:
  description: How many times SSH to the guest was tried, with backoff, before it was given up.
  returned: failure, when the guest did not accept SSH in the time allowed
  type: int
  sample: 7
rc:
  description: The exit status of the command that failed in the guest.
  returned: failure, when a command in the guest failed
  type: int
  sample: 128
stderr_tail:
  description: The last lines of the standard error of the command that failed in the guest.
  returned: failure, when a command in the guest failed
  type: str
  sample: "fatal: could not read Username for 'https://git.example.com': terminal prompts disabled"
# END failure_facts.GUEST
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import ArchiveFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import argument_spec as archive_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    history_argument_spec,
    journal_argument_spec,
    open_history,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import fail_step, running_step


def argument_spec():
    spec = dict(
        name=dict(type='str', required=True),
        mode=dict(type='str', default='archive', choices=['archive', 'check']),
        claim=dict(type='dict'),
    )
    spec.update(archive_argument_spec())
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(argument_spec=argument_spec(), supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = module.params
    with open_history(module, create=False) as journal:
        flow = ArchiveFlow(journal, params, claim=params['claim'], check_mode=module.check_mode)
        failpoint.enter(params['name'], 'archive.' + params['mode'])
        try:
            if params['mode'] == 'check':
                result = flow.check()
            else:
                with running_step(journal, params['claim'], 'archive', params['name'], module.check_mode):
                    result = flow.archive()
        except EphemeraError as err:
            failure = dict(archive_dir=flow.archive_dir, notes=flow.notes)
            failure.update(err.details)
            what = 'Archiving' if params['mode'] == 'archive' else 'Checking the unsaved work of'
            fail_step(module, '%s workspace %s failed: %s' % (what, params['name'], err), journal, params['claim'],
                      params['name'], **failure)
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
