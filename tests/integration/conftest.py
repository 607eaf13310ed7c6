"""The integration tests' order: the files that take minutes on one worker go first.

make integration runs the files on several workers, each taking whole files in the order they are collected. A long
file collected late (tests/integration/template comes near the end of the alphabet) would run alone after the others
had finished; started first, it runs beside them. The tests inside a file keep their order.
"""

# The longest files, longest first, from `pytest -n 3 --dist loadfile --durations=0 tests/integration` (the
# seconds of each file's setup, calls and teardown added up): the leases of the three clouds wait out their
# short leases for four and a half minutes; the template build's file builds its first version before its tests;
# the default toolset's file builds two templates of the full toolset; the agent user's file makes a workspace on
# every cloud first.
FIRST = ('leases/test_cloud_leases.py', 'template/test_build.py', 'template/test_toolset.py',
         'create/test_expire.py', 'security/test_agent_user_on_every_cloud.py', 'aws/test_aws_playbooks.py',
         'azure/test_azure_playbooks.py', 'agents/test_aws_agents.py', 'create/test_rerun_and_report.py',
         'create/test_failures.py', 'molecule/test_molecule.py', 'create/test_many.py', 'gcp/test_gcp_playbooks.py')


def rank(item):
    path = item.nodeid.split('::', 1)[0]
    for n, suffix in enumerate(FIRST):
        if path.endswith(suffix):
            return n
    return len(FIRST)


def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    items[:] = sorted(items, key=rank)
