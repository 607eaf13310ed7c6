#!/usr/bin/env bash
# The main job on the try-out cloud's Compute Engine fake (docs/gcp.md): start the cloud, create a workspace (an
# instance with a real SSH guest and the expiry guard installed) from a small local git repository, show it ready, run
# the guard once as its timer would, destroy it, check that its instance is gone (its deletion operation DONE without
# an error, and a GET answering 404), stop the cloud.
# Exits non-zero if any of that fails; the cloud is stopped whatever happens.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bin=.venv/bin
demo_dir=${DEMO_DIR:-$top/.localcloud-demo-gcp}
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

say "starting the try-out cloud (its Compute Engine fake + real sshd guests)"
"$bin/python" -m tests.localcloud up --host 127.0.84.1 --port 0
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

say "creating workspace '$workspace' on Compute Engine (provider gcp)"
"$bin/ansible-playbook" -i inventories/localcloud-gcp playbooks/create.yml -e "$extra"

say "the workspace as the journal records it"
"$bin/ansible" localhost -i inventories/localcloud-gcp -m ephemera.workspaces.workspace_info \
  -a "name=$workspace" | sed -n '1,40p'

say "the expiry guard in the instance, run once as its timer runs it"
"$bin/python" - <<'PY'
import os
import shlex
import subprocess
import sys

from tests.localcloud import CloudClient

cloud = CloudClient()
[instance] = [i for i in cloud.gcp('instances') if (i.get('labels') or {}).get('ephemera-workspace') == 'demo']
root = instance['root']
with open(os.path.join(root, 'etc/systemd/system/ephemera-gcp-guard.service')) as f:
    line = [l for l in f.read().splitlines() if l.startswith('ExecStart=')][0][len('ExecStart='):]
argv = [os.path.join(root, a.lstrip('/')) if a.endswith('/ephemera-gcp-guard') else a for a in shlex.split(line)]
done = subprocess.run(argv, capture_output=True, text=True, check=False)
print(done.stdout, end='')
if done.returncode != 0 or 'skip' not in done.stdout:
    sys.exit('the guard should have left the live workspace alone')
PY

say "destroying workspace '$workspace'"
"$bin/ansible-playbook" -i inventories/localcloud-gcp playbooks/destroy.yml -e "workspace=$workspace"

say "its instance, as the Compute Engine fake shows it"
"$bin/python" - <<'PY'
import sys

from tests.localcloud import CloudClient

cloud = CloudClient()
left = [i for i in cloud.gcp('instances') if (i.get('labels') or {}).get('ephemera-workspace') == 'demo']
calls = cloud.gcp('calls')
deletes = [c for c in calls if c[0] == 'DELETE' and '/instances/' in c[1]]
violations = cloud.gcp('violations')
print('instances left: %d, DELETE requests: %d, answers outside the Compute v1 schema: %d'
      % (len(left), len(deletes), len(violations)))
if left or len(deletes) != 1 or violations:
    sys.exit('the workspace should have had exactly one instance, deleted now, and every answer valid')
PY
say "demo finished"
