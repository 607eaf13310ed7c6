"""The integration tests' order (the files that take minutes on one worker go first), and which are long.

make integration runs the files on several workers, each taking whole files in the order they are collected. A long
file collected late (tests/integration/template comes near the end of the alphabet) would run alone after the others
had finished; started first, it runs beside them. The tests inside a file keep their order.

The tests of the files in LONG carry the marker ``long``: make test leaves them out (``-m 'not long'``) and make
test-long runs them (``-m long``), beside the matrix's rows of the template build and of the clouds. CI runs both.
"""

import pytest

# The longest files, longest first, from `pytest -n 3 --dist loadfile --durations=0 tests/integration` (the
# seconds of each file's setup, calls and teardown added up): the leases of the three clouds wait out their
# short leases for four and a half minutes; the template build's file builds its first version before its tests;
# the default toolset's file builds two templates of the full toolset; the agent user's file makes a workspace on
# every cloud first.
FIRST = ('leases/test_cloud_leases.py', 'template/test_build.py', 'template/test_toolset.py',
         'create/test_expire.py', 'security/test_agent_user_on_every_cloud.py', 'aws/test_aws_playbooks.py',
         'azure/test_azure_playbooks.py', 'agents/test_aws_agents.py', 'create/test_rerun_and_report.py',
         'create/test_failures.py', 'molecule/test_molecule.py', 'create/test_many.py', 'gcp/test_gcp_playbooks.py',
         'create/test_pools.py')


# The long end-to-end runs, each many CPU-minutes on the two cores (make test-long): the template builds (guests of
# the debian tier provisioned with Debian's packages; the default toolset's two builds install the real agent CLIs from
# npm into a 4.3 GB template), the warm pools on every provider, the agent's own user on every cloud (a try-out cloud
# and its guests each), the leases on the clouds (which wait out their idle timeouts and TTLs: four and a half
# minutes of one worker), the real agent CLIs on EC2, twenty workspaces made in one run, and the Molecule scenarios
# (a try-out cluster of their own). Their paths (the part after tests/integration/).
LONG = ('template/test_build.py', 'template/test_toolset.py', 'security/test_agent_user_on_every_cloud.py',
        'leases/test_cloud_leases.py', 'create/test_many.py',
        'create/test_pools.py', 'aws/test_pools.py', 'hetzner/test_pools.py', 'gcp/test_pools.py',
        'azure/test_pools.py', 'agents/test_aws_agents.py', 'molecule/test_molecule.py')


def relative_path(item):
    """The path of ``item``'s file under tests/integration/."""
    path = item.nodeid.split('::', 1)[0]
    return path.split('tests/integration/', 1)[-1]


def rank(item):
    path = item.nodeid.split('::', 1)[0]
    for n, suffix in enumerate(FIRST):
        if path.endswith(suffix):
            return n
    return len(FIRST)


def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    for item in items:
        if relative_path(item) in LONG:
            item.add_marker(pytest.mark.long)
    items[:] = sorted(items, key=rank)
