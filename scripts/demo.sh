#!/usr/bin/env bash
# The main job on the local try-out cluster: start it, create a workspace from a small local git
# repository, show it ready with its activity and how to reach it, destroy it, stop the cluster.
# Exits non-zero if any of that fails; the cluster is stopped whatever happens.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bin=.venv/bin
demo_dir=${DEMO_DIR:-$top/.localpve-demo}
export LOCALPVE_STATE_DIR="$demo_dir/cluster"
export EPHEMERA_JOURNAL="$demo_dir/journal.sqlite"
export ANSIBLE_NOCOLOR=${ANSIBLE_NOCOLOR:-}
workspace=demo

say() { printf '\n=== %s\n' "$*"; }

stop_cluster() {
  say "stopping the try-out cluster"
  "$bin/python" -m tests.localpve down || true
}

rm -rf "$demo_dir"
mkdir -p "$demo_dir"

say "starting the try-out cluster (fakepve + real sshd guests)"
"$bin/python" -m tests.localpve up --time-scale 0.05
trap stop_cluster EXIT

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

say "creating workspace '$workspace'"
"$bin/ansible-playbook" -i inventories/localpve playbooks/create.yml -e "$extra"

say "the workspace as the journal records it"
"$bin/ansible" localhost -i inventories/localpve -m ephemera.workspaces.workspace_info -a "name=$workspace" \
  | sed -n '1,40p'

if [ -f playbooks/destroy.yml ]; then
  say "destroying workspace '$workspace'"
  "$bin/ansible-playbook" -i inventories/localpve playbooks/destroy.yml -e "workspace=$workspace"
else
  say "destroy is not part of the collection yet: the workspace stays until the cluster stops"
fi
say "demo finished"
