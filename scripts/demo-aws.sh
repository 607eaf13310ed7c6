#!/usr/bin/env bash
# The main job on the local try-out cloud for AWS (docs/localcloud.md): start it, create a workspace (an EC2
# instance with a real SSH guest) from a small local git repository, show it ready with its activity and how to
# reach it, destroy it, check that its instance is terminated, stop the cloud.
# Exits non-zero if any of that fails; the cloud is stopped whatever happens.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bin=.venv/bin
demo_dir=${DEMO_DIR:-$top/.localcloud-demo}
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

say "starting the try-out cloud (moto behind a fault proxy + real sshd guests)"
"$bin/python" -m tests.localcloud up --host 127.0.82.1 --port 0
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

say "creating workspace '$workspace' on EC2 (provider aws)"
"$bin/ansible-playbook" -i inventories/localcloud playbooks/create.yml -e "$extra"

say "the workspace as the journal records it"
"$bin/ansible" localhost -i inventories/localcloud -m ephemera.workspaces.workspace_info -a "name=$workspace" \
  | sed -n '1,40p'

say "the instances of the try-out cloud"
"$bin/python" -m tests.localcloud status

say "destroying workspace '$workspace'"
"$bin/ansible-playbook" -i inventories/localcloud playbooks/destroy.yml -e "workspace=$workspace"

say "its instance, as EC2 shows it"
"$bin/python" - <<'PY'
import json
import sys

from tests.localcloud import CloudClient

cloud = CloudClient()
ours = [i for i in cloud.instances() if i['tags'].get('ephemera:workspace') == 'demo']
print(json.dumps([{k: i[k] for k in ('instance_id', 'state', 'sshd')} for i in ours], indent=2))
if len(ours) != 1 or ours[0]['state'] not in ('shutting-down', 'terminated'):
    sys.exit('the workspace should have had exactly one instance, terminated now')
PY
say "demo finished"
