# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:

    DOCUMENTATION = r'''
options:
  journal_path:
    description:
      - Path of the journal, the SQLite file in which the collection records every workspace, its event log,
        operation intents, cleanup debt and idempotency records.
      - If not set, the environment variable E(EPHEMERA_JOURNAL) is used; if that is not set either,
        C($XDG_STATE_HOME/ephemera/journal.sqlite), or C(~/.local/state/ephemera/journal.sqlite) without
        E(XDG_STATE_HOME).
      - Every play that manages the same workspaces must use the same journal.
      - Not used when O(journal_url) is set.
    type: path
  journal_url:
    description:
      - URL of a journal on PostgreSQL, for controllers that share one journal (AWX jobs, several hosts), for example
        V(postgresql://ephemera@db.example/ephemera?sslmode=verify-full). When set, it is used instead of O(journal_path).
      - If not set, the environment variable E(EPHEMERA_JOURNAL_URL) is used; without either, the journal is the SQLite
        file of O(journal_path).
      - The password comes from the URL, the password file (V(passfile=) in the URL, E(PGPASSFILE) or C(~/.pgpass)) or
        E(PGPASSWORD); TLS settings (V(sslmode), V(sslrootcert), V(sslcert), V(sslkey)) in the URL or the E(PGSSLMODE)
        family are passed to the server unchanged. The value is never shown in output or logs, and messages name the
        journal by its URL without the password.
      - Needs the Python package C(psycopg) (version 3) on the controller. The database must be the journal's own (or
        the URL must select a schema of its own with V(options=-csearch_path%3Dephemera)).
    type: str
'''
