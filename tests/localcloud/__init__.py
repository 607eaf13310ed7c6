"""The local try-out cloud for AWS: moto in server mode behind a fault proxy, with real SSH guests.

    python -m tests.localcloud up | status | fault ... | down      (docs/localcloud.md; faults: docs/internals/localcloud.md)

From Python (tests):

    from tests.localcloud import CloudClient, cloud_process
    with cloud_process(tmp_path / 'cloud') as cloud: ...     # a cloud process of one's own (a CloudClient)
    client = CloudClient(state_dir=...)                     # a cloud started with `up`

Names are imported when first used, so the command line does not load moto when it does not need it.
"""

import importlib

_EXPORTS = {
    'CloudError': 'config', 'Options': 'config', 'load_info': 'config', 'state_dir': 'config',
    'CloudApi': 'control', 'CloudClient': 'control',
    'cloud_process': 'fixtures',
    'up': 'process', 'down': 'process',
    'ec2_client': 'clients', 'foreign_client': 'clients', 'aws_env': 'clients',
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError('module {0!r} has no attribute {1!r}'.format(__name__, name))
    return getattr(importlib.import_module('.' + _EXPORTS[name], __name__), name)
