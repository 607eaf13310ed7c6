"""A provider written outside the collection, and the collection with it registered: the proof that a provider is
one package.

    top = install(directory)      # <directory>/ansible_collections/ephemera/workspaces: this checkout + the provider
    run_ansible([...], pin=top)   # playbooks that find the collection there (tests/ansible_run.py)

The provider, ``folder`` (tests/providerkit/folder), keeps its machines as directories of a folder that the try-out
cloud follows (tests/localcloud/folder_site.py). install() adds it the way a provider is added (docs/providers.md):
its package under plugins/module_utils/providers/, and one line in the registry. Everything else of the collection
is this checkout's, linked, unchanged: CHANGED says which files differ, and the test of the provider checks that it is
the registry alone.
"""

import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'folder')
PROVIDERS = ('plugins', 'module_utils', 'providers')
REGISTRY = 'registry.py'
# The line that registers the provider, in the registry's PROVIDERS.
LINE = ("    'folder': ('ansible_collections.ephemera.workspaces.plugins.module_utils.providers.folder.provider', "
        "'FolderProvider'),\n")
# The files of the collection install() changes (besides adding the package).
CHANGED = (os.path.join(*PROVIDERS, REGISTRY),)


def registered(text):
    """The registry's source ``text`` with LINE added at the end of PROVIDERS."""
    lines = text.splitlines(True)
    start = lines.index('PROVIDERS = {\n')
    end = lines.index('}\n', start)
    return ''.join(lines[:end] + [LINE] + lines[end:])


def install(directory):
    """The collections directory (``directory``) holding ephemera.workspaces as this checkout with the folder
    provider added: every path linked to the checkout's, but for the providers' directory, where the package is
    linked in beside the others and the registry is a copy with LINE."""
    target = os.path.join(directory, 'ansible_collections', 'ephemera', 'workspaces')
    shutil.rmtree(os.path.dirname(os.path.dirname(target)), ignore_errors=True)
    here, there = ROOT, target
    for part in PROVIDERS:
        os.makedirs(there)
        for name in os.listdir(here):
            if name != part:
                os.symlink(os.path.join(here, name), os.path.join(there, name))
        here, there = os.path.join(here, part), os.path.join(there, part)
    os.makedirs(there)
    for name in os.listdir(here):
        if name not in (REGISTRY, '__pycache__'):
            os.symlink(os.path.join(here, name), os.path.join(there, name))
    with open(os.path.join(here, REGISTRY), encoding='utf-8') as src:
        text = registered(src.read())
    with open(os.path.join(there, REGISTRY), 'w', encoding='utf-8') as out:
        out.write(text)
    os.symlink(PACKAGE, os.path.join(there, 'folder'))
    return directory
