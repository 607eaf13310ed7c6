# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:
    """The option of the modules that act on what earlier runs recorded (destroy, reconcile, expire, archive, the
    readers of the status playbook), and of those that may start a journal (create, template build, the queue)."""

    DOCUMENTATION = r'''
options:
  new_journal:
    description:
      - A module that acts on what earlier runs recorded refuses by default a journal that does not exist at the
        configured place (a wrong path, a fresh container in AWX) instead of starting it empty or reading it as empty.
      - A module that starts the journal on a controller's first run (a create, a template build) does so in a file
        on its own, but never in a PostgreSQL database (O(journal_url)) without this option, since a database that
        lacks the journal is as likely a wrong one (a typo in the URL, another database of the server).
      - Set it (the variable C(ephemera_new_journal), or E(EPHEMERA_NEW_JOURNAL)) to say that this is the first run of
        a controller that has recorded nothing yet; then the module behaves as if the empty journal were there, or
        starts it.
    type: bool
    default: false
'''
