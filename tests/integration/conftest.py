"""The integration tests' order: the files that take minutes on one worker go first.

make integration runs the files on several workers, each taking whole files in the order they are collected. A long
file collected late (tests/integration/template comes near the end of the alphabet) would run alone after the others
had finished; started first, it runs beside them. The tests inside a file keep their order.
"""

# The longest files, longest first (pytest --durations on make test: the template build's file spends five minutes
# building its first version before its tests; the default toolset's file builds two templates of the full toolset).
FIRST = ('template/test_build.py', 'template/test_toolset.py', 'aws/test_aws_playbooks.py', 'azure/test_azure_playbooks.py',
         'molecule/test_molecule.py', 'create/test_expire.py', 'gcp/test_gcp_playbooks.py')


def rank(item):
    path = item.nodeid.split('::', 1)[0]
    for n, suffix in enumerate(FIRST):
        if path.endswith(suffix):
            return n
    return len(FIRST)


def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    items[:] = sorted(items, key=rank)
