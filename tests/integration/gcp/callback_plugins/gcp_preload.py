"""A callback plugin for the GCP integration tests: it imports google-cloud-compute in ansible-playbook's own process,
before any task, so every task's worker (a fork of that process) has it loaded. Without it, each task that reaches
the GCP provider imports the library anew in its worker (several seconds each on a loaded machine). The collection's
code and what it sends are unchanged; only where the import happens differs. Enabled by gcprun.py for its runs."""

import importlib

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: gcp_preload
type: aggregate
short_description: import google-cloud-compute before the tasks fork (tests only)
description:
  - Imports C(google.cloud.compute_v1) and the Google auth and API core packages once in the controller.
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gcp_preload'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ('google.api_core.exceptions', 'google.auth.credentials', 'google.cloud.compute_v1'):
            importlib.import_module(name)
