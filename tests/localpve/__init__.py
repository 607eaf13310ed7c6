"""The local try-out cluster: a fake Proxmox VE datacenter with real SSH guests and fault injection.

    python -m tests.localpve up | status | fault ... | down      (docs/localpve.md; faults: docs/internals/localpve.md)

From Python (tests):

    from tests.localpve import LocalCluster, ControlClient
    cluster = LocalCluster.start(tmp_path)          # in this process
    client = ControlClient(state_dir=...)           # a cluster started with `up`

Names are imported when first used, so the command line does not load the server side it does not need.
"""

import importlib

_EXPORTS = {
    'ClusterError': 'config', 'Options': 'config', 'load_info': 'config', 'state_dir': 'config',
    'ControlClient': 'control', 'FaultApi': 'control',
    'LocalCluster': 'cluster',
    'up': 'process', 'down': 'process',
    'Workspace': 'clients', 'clone_workspace': 'clients', 'guest_address': 'clients', 'proxmox': 'clients',
    'ssh': 'clients', 'ssh_run': 'clients', 'wait_task': 'clients',
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError('module {0!r} has no attribute {1!r}'.format(__name__, name))
    return getattr(importlib.import_module('.' + _EXPORTS[name], __name__), name)
