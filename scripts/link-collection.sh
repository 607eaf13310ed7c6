#!/usr/bin/env bash
# Make this checkout resolvable as the collection ephemera.workspaces inside a virtualenv:
# ansible-core searches every sys.path entry for an ansible_collections package, so a link in the
# venv's site-packages is enough for ansible-doc, ansible-playbook and the plugins' own imports.
set -euo pipefail
venv=${1:-.venv}
top=$(cd "$(dirname "$0")/.." && pwd)
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/ansible_collections/ephemera"
ln -sfn "$top" "$site/ansible_collections/ephemera/workspaces"
