# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
name: journal
short_description: Read workspace records from the journal
version_added: 0.1.0
description:
  - Returns the journal's record of the named workspaces, or of every workspace that matches O(status) and
    O(activity) when no name is given.
  - Read-only and local to the controller; the cluster is not asked. A journal that does not exist yet is an error
    that names the path, so a typo in O(journal_path) does not pass for "no workspaces".
  - Every string it returns is marked unsafe, so a purpose that looks like a template is never evaluated.
author:
  - Ephemera maintainers (@ephemera)
options:
  _terms:
    description: Names of workspaces. A name that is not recorded is an error, unless O(missing=skip).
    type: list
    elements: str
    required: false
  status:
    description: With no names, only workspaces in one of these statuses.
    type: list
    elements: str
  activity:
    description: With no names, only workspaces with one of these activities.
    type: list
    elements: str
  missing:
    description: What to do with a name that is not recorded.
    type: str
    choices: [error, skip]
    default: error
  journal_path:
    description:
      - Path of the journal. See the modules' O(journal_path) for the default.
    type: path
    env:
      - name: EPHEMERA_JOURNAL
  journal_url:
    description:
      - URL of a journal on PostgreSQL (see the modules' O(journal_url)); when set, O(journal_path) is not used.
    type: str
    env:
      - name: EPHEMERA_JOURNAL_URL
'''

EXAMPLES = r'''
- name: Address of one workspace
  ansible.builtin.debug:
    msg: "{{ lookup('ephemera.workspaces.journal', 'fix-login-bug').address }}"

- name: Names of every ready workspace whose agent is idle
  ansible.builtin.debug:
    msg: "{{ query('ephemera.workspaces.journal', status='ready', activity='idle') | map(attribute='name') }}"
'''

RETURN = r'''
_list:
  description: One workspace record (a dict, as ephemera.workspaces.workspace_info returns it) per name or match.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.unsafe_proxy import wrap_var

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import (
    WORKSPACE_ACTIVITIES,
    WORKSPACE_STATUSES,
    Journal,
)


def _as_list(value):
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


class LookupModule(LookupBase):

    @staticmethod
    def _shown(journal, record):
        """The record with its lease as readers show it and its cleanup status."""
        record.update(leasing.view(record, time.time(), debt=journal.cleanup_debts(record['name'])))
        return record

    def run(self, terms, variables=None, **kwargs):
        # Every string of a record (a purpose typed into a survey, a container's name) is marked unsafe, so that no
        # version of Ansible evaluates it as a template, whatever allow_unsafe the caller gives.
        return wrap_var(self._records(terms, variables, **kwargs))

    def _records(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        status = _as_list(self.get_option('status'))
        activity = _as_list(self.get_option('activity'))
        for name, given, allowed in (('status', status, WORKSPACE_STATUSES), ('activity', activity, WORKSPACE_ACTIVITIES)):
            bad = sorted(set(given or ()) - set(allowed))
            if bad:
                raise AnsibleLookupError('ephemera.workspaces.journal: unknown %s %s; expected one of %s.'
                                         % (name, ', '.join(bad), ', '.join(allowed)))
        try:
            with Journal.open(self.get_option('journal_path'), readonly=True,
                              url=self.get_option('journal_url')) as journal:
                if not terms:
                    return [self._shown(journal, record) for record in
                            journal.list_workspaces(status=status, activity=activity)]
                found = []
                for name in terms:
                    record = journal.get_workspace(name)
                    if record is not None:
                        found.append(self._shown(journal, record))
                    elif self.get_option('missing') == 'error':
                        raise AnsibleLookupError('ephemera.workspaces.journal: no workspace named %r in %s.'
                                                 % (name, journal.path))
                return found
        except EphemeraError as err:
            raise AnsibleLookupError('ephemera.workspaces.journal: %s' % err)
