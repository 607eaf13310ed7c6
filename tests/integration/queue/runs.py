"""Helpers for the queue's integration tests: journal reads and the gate a held operation waits for."""

import os
import sqlite3

HERE = os.path.dirname(os.path.abspath(__file__))
OP_PLAYBOOK = os.path.join(HERE, 'op.yml')


def query(path, sql, args=()):
    """Rows of a read-only query against the journal file (a fresh connection each time)."""
    if not os.path.exists(path):
        return []
    conn = sqlite3.connect(path, timeout=60)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql, args).fetchall()]
    except sqlite3.OperationalError as exc:
        if 'no such table' in str(exc):
            return []
        raise
    finally:
        conn.close()


def open_gate(path):
    with open(path, 'w') as f:
        f.write('open\n')
