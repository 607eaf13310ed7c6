#!/usr/bin/env bash
# The main job on the try-out cloud's Hetzner Cloud fake (docs/hetzner.md): start the cloud, create a workspace (a
# server with a real SSH guest) from a small local git repository, show it ready, destroy it, check that its
# server is gone (its deletion action succeeded and the server answers 404), stop the cloud.
# Exits non-zero if any of that fails; the cloud is stopped whatever happens.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bin=.venv/bin
demo_dir=${DEMO_DIR:-$top/.localcloud-demo-hetzner}
export LOCALCLOUD_STATE_DIR="$demo_dir/cloud"
export EPHEMERA_JOURNAL="$demo_dir/journal.sqlite"
export ANSIBLE_NOCOLOR=${ANSIBLE_NOCOLOR:-}
workspace=demo

say() { printf '\n=== %s\n' "$*"; }

stop_cloud() {
  say "stopping the try-out cloud"
  "$bin/python" -m tests.localcloud down || true
}

rm -rf "$demo_dir"
mkdir -p "$demo_dir"

say "starting the try-out cloud (its Hetzner Cloud fake + real sshd guests)"
"$bin/python" -m tests.localcloud up --host 127.0.83.1 --port 0
trap stop_cloud EXIT

say "making a small git repository to work on"
repo="$demo_dir/repo"
git init --quiet --initial-branch=main "$repo"
printf 'def greet(name):\n    return "hello " + name\n' > "$repo/greet.py"
git -C "$repo" add greet.py
git -C "$repo" -c user.name=demo -c user.email=demo@example.invalid commit --quiet -m "a greeting"

extra=$(cat <<JSON
{"workspace": "$workspace", "repo": "file://$repo", "ref": "main",
 "purpose": "Add a farewell function next to greet",
 "agent": "demo",
 "ephemera_agents": {"demo": ["sh", "-c", "echo 'working on: {purpose}'; sleep 5; echo done"]}}
JSON
)

say "creating workspace '$workspace' on Hetzner Cloud (provider hetzner)"
"$bin/ansible-playbook" -i inventories/localcloud-hetzner playbooks/create.yml -e "$extra"

say "the workspace as the journal records it"
"$bin/ansible" localhost -i inventories/localcloud-hetzner -m ephemera.workspaces.workspace_info \
  -a "name=$workspace" | sed -n '1,40p'

say "destroying workspace '$workspace'"
"$bin/ansible-playbook" -i inventories/localcloud-hetzner playbooks/destroy.yml -e "workspace=$workspace"

say "its server, as the Hetzner fake shows it"
"$bin/python" - <<'PY'
import sys

from tests.localcloud import CloudClient

cloud = CloudClient()
left = [s for s in cloud.hetzner('servers') if (s.get('labels') or {}).get('ephemera-workspace') == 'demo']
deletes = [r for r in cloud.hetzner('requests') if r['method'] == 'DELETE' and r['path'].startswith('/servers/')]
print('servers left: %d, DELETE requests: %d' % (len(left), len(deletes)))
if left or len(deletes) != 1:
    sys.exit('the workspace should have had exactly one server, deleted now')
PY
say "demo finished"
