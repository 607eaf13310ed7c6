# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal's schema, written once for both stores: every table, index and guard of schema ``VERSION``.

A new journal is made from it at once, on SQLite (``core/journal.py``) and on PostgreSQL (``core/journal_pg.py``);
a journal of an older schema is brought forward by each store's own migrations, which are history and never edited.
``tests/unit/plugins/module_utils/test_journal_schema.py`` checks that an old journal, migrated, has this schema.

A column is ``name TYPE [constraints]``. The types are the journal's own, rendered for each store:

- ``TEXT``; ``REAL`` (unix seconds: ``REAL`` / ``DOUBLE PRECISION``); ``INTEGER`` (``INTEGER`` / ``BIGINT``);
- ``ID``: the row's own increasing key (``INTEGER PRIMARY KEY AUTOINCREMENT`` / ``BIGSERIAL PRIMARY KEY``);
- ``TYPED``: a value that keeps its type, an integer VMID or a cloud's text id (no affinity on SQLite; JSON text
  on PostgreSQL, which ``journal_pg.PgConnection`` writes and reads back).
"""

import re

VERSION = 5

# (table, columns and table constraints), in the order a journal made by the migrations has them.
TABLES = (
    ('meta', """
        key             TEXT PRIMARY KEY,
        value           TEXT NOT NULL"""),
    ('workspaces', """
        name            TEXT PRIMARY KEY,
        status          TEXT NOT NULL,
        activity        TEXT NOT NULL DEFAULT 'unknown',
        desired_state   TEXT NOT NULL DEFAULT 'present',
        provider        TEXT NOT NULL DEFAULT 'proxmox',
        location        TEXT,
        resource_id     TYPED,
        candidate_id    TYPED,
        provider_tasks  TEXT NOT NULL DEFAULT '{}',
        address         TEXT,
        repo            TEXT,
        ref             TEXT,
        purpose         TEXT,
        failure         TEXT,
        params          TEXT NOT NULL DEFAULT '{}',
        progress        TEXT NOT NULL DEFAULT '{}',
        facts           TEXT NOT NULL DEFAULT '{}',
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        generation      INTEGER NOT NULL,
        lease           TEXT,
        lease_expires_at REAL,
        cleanup         TEXT NOT NULL DEFAULT '{}'"""),
    # Append-only: the store refuses to change or delete a row (APPEND_ONLY).
    ('events', """
        id              ID,
        workspace       TEXT NOT NULL,
        at              REAL NOT NULL,
        actor           TEXT NOT NULL,
        kind            TEXT NOT NULL,
        action          TEXT NOT NULL,
        detail          TEXT NOT NULL DEFAULT '{}'"""),
    ('intents', """
        id              ID,
        op              TEXT NOT NULL,
        target          TEXT NOT NULL,
        owner           TEXT NOT NULL,
        state           TEXT NOT NULL DEFAULT 'open',
        started_at      REAL NOT NULL,
        ended_at        REAL,
        attempts        INTEGER NOT NULL DEFAULT 1,
        resources       TEXT NOT NULL DEFAULT '[]',
        result          TEXT,
        generation      INTEGER NOT NULL DEFAULT 1"""),
    ('cleanup_debt', """
        workspace       TEXT NOT NULL,
        resource        TEXT NOT NULL,
        attempts        INTEGER NOT NULL,
        last_error      TEXT NOT NULL,
        next_retry      REAL NOT NULL,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        PRIMARY KEY (workspace, resource)"""),
    ('address_leases', """
        address         TEXT PRIMARY KEY,
        pool            TEXT NOT NULL,
        workspace       TEXT NOT NULL,
        leased_at       REAL NOT NULL"""),
    ('queue', """
        id              ID,
        kind            TEXT NOT NULL,
        target_type     TEXT NOT NULL,
        target          TEXT NOT NULL,
        params          TEXT NOT NULL DEFAULT '{}',
        fingerprint     TEXT NOT NULL,
        source          TEXT NOT NULL,
        parent_id       INTEGER REFERENCES queue (id),
        state           TEXT NOT NULL DEFAULT 'queued',
        step            TEXT,
        step_at         REAL,
        steps           TEXT NOT NULL DEFAULT '[]',
        owner           TEXT,
        lease_seconds   REAL,
        lease_expires   REAL,
        fence           TEXT,
        claims          INTEGER NOT NULL DEFAULT 0,
        result          TEXT,
        created_at      REAL NOT NULL,
        started_at      REAL,
        updated_at      REAL NOT NULL,
        ended_at        REAL"""),
    ('queue_requests', """
        id              ID,
        entry_id        INTEGER NOT NULL REFERENCES queue (id),
        requested_by    TEXT NOT NULL,
        source          TEXT NOT NULL,
        job_id          TEXT,
        owner           TEXT NOT NULL,
        waits           INTEGER NOT NULL,
        state           TEXT NOT NULL DEFAULT 'waiting',
        at              REAL NOT NULL,
        seen_at         REAL NOT NULL,
        lease_expires   REAL"""),
    ('idempotency', """
        key_hash        TEXT PRIMARY KEY,
        controller      TEXT NOT NULL,
        action          TEXT NOT NULL,
        fingerprint     TEXT NOT NULL,
        state           TEXT NOT NULL,
        owner           TEXT NOT NULL,
        result          TEXT,
        created_at      REAL NOT NULL,
        expires_at      REAL NOT NULL"""),
    # A template name's pointer: the version creates clone (current) and the one before it, switched together.
    ('templates', """
        name            TEXT PRIMARY KEY,
        current         INTEGER,
        previous        INTEGER,
        updated_at      REAL NOT NULL,
        generation      INTEGER NOT NULL"""),
    # Every build: its state, source, the record that carries its candidate, the tools it answered with, its errors.
    ('template_versions', """
        name            TEXT NOT NULL,
        version         INTEGER NOT NULL,
        state           TEXT NOT NULL,
        source          TEXT NOT NULL DEFAULT '{}',
        workspace       TEXT NOT NULL,
        provider        TEXT NOT NULL DEFAULT 'proxmox',
        resource_id     TYPED,
        location        TEXT,
        tools           TEXT NOT NULL DEFAULT '{}',
        errors          TEXT NOT NULL DEFAULT '[]',
        entry           INTEGER,
        created_at      REAL NOT NULL,
        finished_at     REAL,
        PRIMARY KEY (name, version)"""),
    # A provider's own small JSON records beside the workspaces (an Azure set's progress), compare-and-set on
    # generation. Never secrets.
    ('provider_state', """
        key             TEXT PRIMARY KEY,
        value           TEXT NOT NULL,
        generation      INTEGER NOT NULL,
        updated_at      REAL NOT NULL"""),
)

INDEXES = (
    'CREATE INDEX workspaces_status ON workspaces (status)',
    'CREATE INDEX workspaces_resource ON workspaces (provider, resource_id)',
    'CREATE INDEX workspaces_expiry ON workspaces (lease_expires_at)',
    'CREATE INDEX events_workspace ON events (workspace, id)',
    'CREATE INDEX intents_open ON intents (state, target)',
    'CREATE UNIQUE INDEX address_leases_workspace ON address_leases (pool, workspace)',
    'CREATE INDEX queue_target ON queue (target_type, target, state, id)',
    'CREATE INDEX queue_state ON queue (state, id)',
    'CREATE INDEX queue_parent ON queue (parent_id)',
    'CREATE INDEX queue_requests_entry ON queue_requests (entry_id, id)',
)

APPEND_ONLY = ('events',)
APPEND_ONLY_MESSAGE = 'the event log is append-only'

TYPES = {
    'sqlite': {'TEXT': 'TEXT', 'REAL': 'REAL', 'INTEGER': 'INTEGER', 'ID': 'INTEGER PRIMARY KEY AUTOINCREMENT',
               'TYPED': ''},
    'postgresql': {'TEXT': 'TEXT', 'REAL': 'DOUBLE PRECISION', 'INTEGER': 'BIGINT', 'ID': 'BIGSERIAL PRIMARY KEY',
                   'TYPED': 'TEXT'},
}
DIALECTS = tuple(TYPES)
TABLE_NAMES = tuple(name for name, _columns in TABLES)

_COLUMN = re.compile(r'^(\w+)\s+(TEXT|REAL|INTEGER|ID|TYPED)\b\s*(.*)$')


def columns(table):
    """[(column, journal type)] of ``table``, in order."""
    found = []
    for line in dict(TABLES)[table].split(',\n'):
        match = _COLUMN.match(line.strip())
        if match:
            found.append((match.group(1), match.group(2)))
    return found


def _column(line, dialect):
    line = line.strip()
    match = _COLUMN.match(line)
    if match is None:  # a table constraint: PRIMARY KEY (a, b)
        return line
    name, kind, rest = match.groups()
    return ' '.join(part for part in (name, TYPES[dialect][kind], rest) if part)


def _guards(table, dialect):
    if dialect == 'sqlite':
        return ["CREATE TRIGGER %s_append_only_%s BEFORE %s ON %s BEGIN SELECT RAISE(ABORT, '%s'); END"
                % (table, what.lower(), what, table, APPEND_ONLY_MESSAGE) for what in ('UPDATE', 'DELETE')]
    return [
        "CREATE FUNCTION %s_append_only() RETURNS trigger LANGUAGE plpgsql AS $body$ BEGIN RAISE EXCEPTION '%s'; END "
        "$body$" % (table, APPEND_ONLY_MESSAGE),
        'CREATE TRIGGER %s_append_only_rows BEFORE UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION '
        '%s_append_only()' % (table, table, table),
        'CREATE TRIGGER %s_append_only_truncate BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION '
        '%s_append_only()' % (table, table, table),
    ]


def statements(dialect):
    """The statements that make an empty journal of schema ``VERSION`` in ``dialect`` ('sqlite', 'postgresql')."""
    if dialect not in TYPES:
        raise ValueError('No journal store speaks %r; the dialects are %s.' % (dialect, ', '.join(DIALECTS)))
    made = []
    for table, body in TABLES:
        lines = [_column(line, dialect) for line in body.split(',\n')]
        made.append('CREATE TABLE %s (\n    %s\n)' % (table, ',\n    '.join(lines)))
    made.extend(INDEXES)
    for table in APPEND_ONLY:
        made.extend(_guards(table, dialect))
    return made
