#!/usr/bin/env bash
# The main job on a local try-out place, end to end: start it, create a workspace from a small local git
# repository, show it ready with its activity and how to reach it, destroy it, check what is left, stop it.
#
#   scripts/demo.sh [PROVIDER]     PROVIDER: proxmox (the default: the try-out cluster, docs/localpve.md),
#                                  aws, hetzner, gcp or azure (the try-out cloud, docs/localcloud.md)
#   AGENT=claude-code|codex|opencode scripts/demo.sh   which real agent CLI works in the workspace (default
#                                  claude-code), against the place's own scripted model endpoint (docs/agents.md)
#
# The agent appends its brief, and then a follow-up brief, to EPHEMERA-NOTES.md in the checkout; destroy archives
# that work (pushed to the branch ephemera/demo of the demo's repository), and the demo shows it from there.
# aws: an EC2 instance with a real SSH guest, terminated at the end. hetzner: a server whose deletion action
# succeeds and which then answers 404. gcp: an instance with the expiry guard installed, run once as its timer would,
# whose deletion operation is DONE without an error and which then answers 404. azure: a VM with its NIC, public IP
# and OS disk, none of which is left at the end.
# Exits non-zero if any of that fails; the cluster or cloud is stopped whatever happens.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# The demo's own virtualenv (make demo: .venv-demo, with only what the demo runs), else the development one.
bin=${EPHEMERA_DEMO_VENV:-.venv}/bin
provider=${1:-${PROVIDER:-proxmox}}
export ANSIBLE_NOCOLOR=${ANSIBLE_NOCOLOR:-}
workspace=demo

say() { printf '\n=== %s\n' "$*"; }

# What differs between the places: where the state goes, how the place starts, its inventory and what the demo
# checks once the workspace is ready (look_ready) and once it is destroyed (look_gone).
look_ready() { :; }
look_gone() { :; }
case "$provider" in
  proxmox|pve|'')
    provider=proxmox
    demo_dir=${DEMO_DIR:-$top/.localpve-demo}
    export LOCALPVE_STATE_DIR="$demo_dir/cluster"
    place=cluster runner=tests.localpve inventory=inventories/localpve on=''
    # Ports of its own: a try-out cluster already up (make cluster-up, on 8006) is left alone.
    up_args=(--time-scale 0.05 --host 127.0.81.1 --api-port 0 --proxy-port 0)
    what="fakepve + real sshd guests"
    ;;
  aws)
    demo_dir=${DEMO_DIR:-$top/.localcloud-demo}
    place=cloud inventory=inventories/localcloud on=" on EC2 (provider aws)"
    up_args=(--host 127.0.82.1 --port 0 --show aws)
    what="moto behind a fault proxy + real sshd guests"
    look_ready() {
      say "the instances of the try-out cloud"
      "$bin/python" -m tests.localcloud status
    }
    look_gone() {
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
    }
    ;;
  hetzner)
    demo_dir=${DEMO_DIR:-$top/.localcloud-demo-hetzner}
    place=cloud inventory=inventories/localcloud-hetzner on=" on Hetzner Cloud (provider hetzner)"
    up_args=(--host 127.0.83.1 --port 0 --show hetzner)
    what="its Hetzner Cloud fake + real sshd guests"
    look_gone() {
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
    }
    ;;
  gcp)
    demo_dir=${DEMO_DIR:-$top/.localcloud-demo-gcp}
    place=cloud inventory=inventories/localcloud-gcp on=" on Compute Engine (provider gcp)"
    up_args=(--host 127.0.84.1 --port 0 --show gcp)
    what="its Compute Engine fake + real sshd guests"
    look_ready() {
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
    }
    look_gone() {
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
    }
    ;;
  azure)
    demo_dir=${DEMO_DIR:-$top/.localcloud-demo-azure}
    place=cloud inventory=inventories/localcloud-azure on=" on Azure (provider azure)"
    up_args=(--host 127.0.86.1 --port 0 --show azure)
    what="its ARM fake over HTTPS, real sshd guests"
    look_ready() {
      say "its Azure resources, one line each"
      "$bin/python" - <<'PY'
from tests.localcloud import CloudClient

for resource in CloudClient().azure('resources'):
    print('  %-18s %-40s %s' % (resource['kind'], resource['name'], resource['state']))
PY
    }
    look_gone() {
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
    }
    ;;
  *)
    echo "Unknown provider '$provider': give proxmox (or nothing), aws, hetzner, gcp or azure." >&2
    exit 2
    ;;
esac
if [ "$place" = cloud ]; then
  runner=tests.localcloud
  export LOCALCLOUD_STATE_DIR="$demo_dir/cloud"
fi
export EPHEMERA_JOURNAL="$demo_dir/journal.sqlite"

stop_place() {
  say "stopping the try-out $place"
  "$bin/python" -m "$runner" down || true
}

rm -rf "$demo_dir"
mkdir -p "$demo_dir"

say "starting the try-out $place ($what)"
"$bin/python" -m "$runner" up "${up_args[@]}"
trap stop_place EXIT

say "making a small git repository to work on"
repo="$demo_dir/repo"
git init --quiet --initial-branch=main "$repo"
printf 'def greet(name):\n    return "hello " + name\n' > "$repo/greet.py"
git -C "$repo" add greet.py
git -C "$repo" -c user.name=demo -c user.email=demo@example.invalid commit --quiet -m "a greeting"

# The real CLI of the agent, from the place's template or image; its model is the place's scripted endpoint.
agent=${AGENT:-claude-code}
extra=$(cat <<JSON
{"workspace": "$workspace", "repo": "file://$repo", "ref": "main",
 "purpose": "Add a farewell function next to greet", "agent": "$agent"}
JSON
)

say "creating workspace '$workspace'$on, briefing the real $agent"
"$bin/ansible-playbook" -i "$inventory" playbooks/create.yml -e "$extra"

say "briefing $agent again: it continues its session"
"$bin/ansible-playbook" -i "$inventory" playbooks/brief.yml -e "workspace=$workspace" \
  -e '{"message": "Now add a test for farewell"}'

say "what the agent did, from its own event stream (the status playbook asks it)"
"$bin/ansible-playbook" -i "$inventory" playbooks/status.yml -e "queue_target=$workspace" \
  | sed -n '/Print what the agents do/,/^$/p'

say "the workspace as the journal records it"
"$bin/python" scripts/demo_summary.py "$workspace" "$inventory"

look_ready

say "destroying workspace '$workspace'"
"$bin/ansible-playbook" -i "$inventory" playbooks/destroy.yml -e "workspace=$workspace"

look_gone

say "the agent's work, archived by the destroy: the branch ephemera/$workspace of the repository"
git -C "$repo" log --oneline -1 "ephemera/$workspace"
git -C "$repo" show "ephemera/$workspace:EPHEMERA-NOTES.md"
git -C "$repo" show "ephemera/$workspace:EPHEMERA-NOTES.md" | grep -q 'Now add a test for farewell' ||
  { echo "the archive should hold both briefs' work" >&2; exit 1; }
say "demo finished"
