"""The journal is a store (core/journal.py) and the records kept in it (journal_workspaces.py, journal_records.py):
the records reach the database only through the store's transaction and reads, and the queue only through the
journal's public methods."""

import ast
import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_module
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_records, journal_workspaces

CORE = os.path.dirname(journal_module.__file__)
# What the store gives the records: its transaction, its reads and clock, and who and where it is.
STORE = {'transaction', '_one', '_all', 'clock', 'actor', 'path', 'backend', 'readonly', 'controller_id'}
RECORDS = ('Workspaces', 'Intents', 'AddressLeases', 'Idempotency', 'ProviderState', 'Templates')


def tree(name):
    with open(os.path.join(CORE, name)) as source:
        return ast.parse(source.read())


def self_attributes(node):
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == 'self'}


def test_the_journal_is_the_store_with_every_record_mixed_in():
    records = [journal_workspaces.Workspaces, journal_workspaces.Intents, journal_workspaces.AddressLeases,
               journal_records.Idempotency, journal_records.ProviderState, journal_records.Templates]
    assert journal_module.Journal.__mro__[1:-1] == tuple(records)
    for record in records:
        for name in vars(record):
            if not name.startswith('__'):
                assert getattr(journal_module.Journal, name) is getattr(record, name), (record, name)


def test_the_records_use_the_store_and_nothing_else_of_it():
    classes = [node for name in ('journal_workspaces.py', 'journal_records.py') for node in tree(name).body
               if isinstance(node, ast.ClassDef) and node.name in RECORDS]
    assert sorted(c.name for c in classes) == sorted(RECORDS)
    own = {f.name for c in classes for f in c.body if isinstance(f, ast.FunctionDef)}
    for record in classes:
        # Never the connection itself: every statement runs in a transaction or one of the store's reads.
        assert self_attributes(record) - own - STORE == set(), record.name


def test_the_queue_uses_the_journals_public_methods_only():
    private = sorted({n.attr for n in ast.walk(tree('queue.py')) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Attribute) and n.value.attr == 'journal' and n.attr.startswith('_')})
    assert private == []
