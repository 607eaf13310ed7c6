#!/usr/bin/env bash
# The main job on the local try-out cloud's ARM fake for Azure (docs/localcloud.md): start the cloud, create a
# workspace (a VM with its NIC, public IP and OS disk, and a real SSH guest) from a small local git repository, show
# it ready with its activity and how to reach it, destroy it, check that none of its four resources is left, stop
# the cloud. Exits non-zero if any of that fails; the cloud is stopped whatever happens.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bin=.venv/bin
demo_dir=${DEMO_DIR:-$top/.localcloud-demo-azure}
export LOCALCLOUD_STATE_DIR="$demo_dir/cloud"
export EPHEMERA_JOURNAL="$demo_dir/journal.sqlite"
# The Azure provider keeps each set's record in a file of its own beside the journal.
export EPHEMERA_AZURE_STATE_DIR="$demo_dir/azure-sets"
export ANSIBLE_NOCOLOR=${ANSIBLE_NOCOLOR:-}
workspace=demo

say() { printf '\n=== %s\n' "$*"; }

stop_cloud() {
  say "stopping the try-out cloud"
  "$bin/python" -m tests.localcloud down || true
}

rm -rf "$demo_dir"
mkdir -p "$demo_dir"

say "starting the try-out cloud (its ARM fake over HTTPS, real sshd guests)"
"$bin/python" -m tests.localcloud up --host 127.0.86.1 --port 0
trap stop_cloud EXIT

say "making a small git repository to work on"
repo="$demo_dir/repo"
git init --quiet --initial-branch=main "$repo"
printf 'def greet(name):\n    return "hello " + name\n' > "$repo/greet.py"
git -C "$repo" add greet.py
git -C "$repo" -c user.name=demo -c user.email=demo@example.invalid commit --quiet -m "a greeting"

# The demo agent stands in for claude-code/codex/opencode: it works on the brief, then finishes.
extra=$(cat <<JSON
{"workspace": "$workspace", "repo": "file://$repo", "ref": "main",
 "purpose": "Add a farewell function next to greet",
 "agent": "demo",
 "ephemera_agents": {"demo": ["sh", "-c", "echo 'working on: {purpose}'; sleep 5; echo done"]}}
JSON
)

say "creating workspace '$workspace' on Azure (provider azure)"
"$bin/ansible-playbook" -i inventories/localcloud-azure playbooks/create.yml -e "$extra"

say "the workspace as the journal records it"
"$bin/ansible" localhost -i inventories/localcloud-azure -m ephemera.workspaces.workspace_info -a "name=$workspace" \
  | sed -n '1,40p'

say "the Azure resources of the try-out cloud"
"$bin/python" -m tests.localcloud fault azure resources

say "destroying workspace '$workspace'"
"$bin/ansible-playbook" -i inventories/localcloud-azure playbooks/destroy.yml -e "workspace=$workspace"

say "what is left of it in Azure"
"$bin/python" - <<'PY'
import json
import sys

from tests.localcloud import CloudClient

left = CloudClient().azure('resources')
print(json.dumps([{k: r[k] for k in ('kind', 'name', 'state')} for r in left], indent=2))
if left:
    sys.exit('the workspace should have left nothing behind: its VM, NIC, public IP and OS disk are all deleted')
PY
say "demo finished"
