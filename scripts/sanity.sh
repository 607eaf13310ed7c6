#!/usr/bin/env bash
# Run `ansible-test sanity` over this collection without reaching anything but the package index.
#
#   scripts/sanity.sh [VENV] [ansible-test sanity options...]     (VENV defaults to .venv)
#
# ansible-test needs three things this checkout does not give it directly:
# - a get-pip bootstrap script, which it downloads from a host outside the package index when it
#   builds a virtualenv; a stand-in built on ensurepip is written into its cache instead;
# - a working directory .../ansible_collections/<namespace>/<name>: the files git knows about
#   (tracked, and untracked but not ignored) are copied into build/sanity/ under that path;
# - a git work tree at that path in which tests/output/ is ignored, because ansible-test tests only
#   the files git reports, and its own virtualenvs live under tests/output/.
# build/sanity/ is kept between runs so its virtualenv under tests/output/.tmp is reused; the
# virtualenvs of the individual tests are cached by ansible-test under ~/.ansible/test/venv.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-.venv}
shift || true
case $venv in /*) ;; *) venv=$top/$venv ;; esac

# All sanity tests run once, on Python 3.11: the project's Python, present on every machine of the
# project, and a controller version of ansible-core 2.19 (3.11-3.13). The modules of this
# collection call the Proxmox VE API and run beside the controller, so one version serves the
# import, pylint and validate-modules tests. Without --python, ansible-test would try every version
# it supports and stop at the first `pythonX.Y` on PATH that does not run (pyenv shims do not).
# The compile test alone is repeated on the other supported versions whose interpreters are found
# below: it takes a second and keeps module code, and what is copied onto guests, loadable by the
# older Pythons of managed hosts.
python_version=3.11

for tool in "$venv/bin/ansible-test" "$venv/bin/python"; do
  [ -x "$tool" ] || { echo "error: $tool not found; run 'make venv' first" >&2; exit 1; }
done
# git and shellcheck (without which ansible-test skips its shellcheck test)
"$top/scripts/system-packages.sh"
git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  { echo "error: $top is not a git work tree; ansible-test tests only the files git knows" >&2; exit 1; }

# get-pip stand-in. ansible-test runs it as `python get_pip_X_Y.py [pip options] pip==X.Y
# [--no-setuptools] [--no-wheel]` with the new virtualenv's python; the real script installs the
# pip it carries. ensurepip carries a pip too, which then installs the wanted version.
pip_version=$("$venv/bin/python" -c '
from types import SimpleNamespace
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(SimpleNamespace(version="'"$python_version"'"))["pip"])')
get_pip=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
marker='# ephemera.workspaces: get-pip stand-in (written by scripts/sanity.sh)'
standin=$(cat <<'EOF'
import os
import subprocess
import sys


def run(cmd):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode:
        sys.stdout.write(done.stdout)
        sys.exit(done.returncode)


run([sys.executable, '-m', 'ensurepip'])
args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]
pip = [sys.executable, '-m', 'pip']
cert = '/etc/ssl/certs/ca-certificates.crt'
if not os.environ.get('PIP_CERT') and os.path.exists(cert):
    pip += ['--cert', cert]
run(pip + ['install', '--quiet'] + args)
# ensurepip up to Python 3.11 also installs setuptools, which the real script leaves out on request
if '--no-setuptools' in sys.argv[1:] and sys.version_info < (3, 12):
    run(pip + ['uninstall', '--yes', '--quiet', 'setuptools'])
EOF
)
standin="$marker"$'\n'"$standin"
if [ -e "$get_pip" ] && [ "$(head -n1 "$get_pip")" != "$marker" ]; then
  : # a real get-pip script someone downloaded works offline too: leave it
elif [ "$(cat "$get_pip" 2>/dev/null)" != "$standin" ]; then
  mkdir -p "$(dirname "$get_pip")"
  printf '%s\n' "$standin" >"$get_pip.tmp"
  mv "$get_pip.tmp" "$get_pip"
fi

# The collection's copy under build/sanity/ansible_collections/<namespace>/<name>.
read -r namespace name < <("$venv/bin/python" -c '
import sys, yaml
meta = yaml.safe_load(open(sys.argv[1]))
print(meta["namespace"], meta["name"])' "$top/galaxy.yml")
work=$top/build/sanity/ansible_collections/$namespace/$name
mkdir -p "$work"
# One run at a time per checkout: a second one would lay the copy anew under the first.
exec 9>"$top/build/sanity/.lock"
flock 9
# Everything but the git metadata and tests/output (ansible-test's virtualenv) is laid anew.
find "$work" -mindepth 1 -maxdepth 1 ! -name .git ! -name tests -exec rm -rf {} +
[ -d "$work/tests" ] && find "$work/tests" -mindepth 1 -maxdepth 1 ! -name output -exec rm -rf {} +
(
  cd "$top"
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do
      # tracked files deleted in the work tree are still listed by --cached
      if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done |
    tar -c --no-recursion --null -f - --files-from=- |
    tar -C "$work" -xf -
)
if [ ! -d "$work/.git" ]; then
  git -C "$work" init --quiet
fi
# Files stay untracked there: ansible-test takes untracked, not ignored files as part of the tree.
printf '%s\n' 'tests/output/' >"$work/.git/info/exclude"

junit=$work/tests/output/junit
rm -rf "$junit"
cd "$work"
echo "sanity: ansible-test sanity --venv --python $python_version in $work"
status=0
"$venv/bin/ansible-test" sanity --venv --python "$python_version" --junit --color no "$@" || status=$?

# The compile test on the other supported versions, unless the caller chose tests with options.
if [ $# -eq 0 ]; then
  targets=()
  missing=()
  versions=$("$venv/bin/python" -c '
from ansible_test._internal.constants import SUPPORTED_PYTHON_VERSIONS
print(" ".join(SUPPORTED_PYTHON_VERSIONS))')
  pyenv_root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for v in $versions; do
    [ "$v" = "$python_version" ] && continue
    found=
    for p in "$(command -v "python$v" || true)" /usr/bin/python"$v" /usr/local/bin/python"$v" \
             "$pyenv_root"/versions/"$v".*/bin/python"$v"; do
      if [ -x "$p" ] && [ "$("$p" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$v" ]; then
        found=$p
        break
      fi
    done
    if [ -n "$found" ]; then
      targets+=(--target-python "$v@$found")
      echo "sanity: compile test also on Python $v: $found"
    else
      missing+=("$v")
    fi
  done
  if [ ${#targets[@]} -gt 0 ]; then
    "$venv/bin/ansible-test" sanity --controller "origin:python=venv/$python_version" "${targets[@]}" \
      --test compile --junit --color no || status=$?
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "sanity: compile test not run for Python ${missing[*]}: no interpreter found"
  fi
fi

# One line per test from the JUnit files ansible-test wrote (one file per test and Python version).
summary=$("$venv/bin/python" - "$junit" <<'EOF'
import glob
import os
import sys
import xml.etree.ElementTree as ET

counts = {'passed': [], 'failed': [], 'skipped': []}
for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.xml'))):
    for case in ET.parse(path).iter('testcase'):
        if case.find('failure') is not None or case.find('error') is not None:
            counts['failed'].append(case.get('name'))
        elif case.find('skipped') is not None:
            counts['skipped'].append('%s (%s)' % (case.get('name'), case.find('skipped').text))
        else:
            counts['passed'].append(case.get('name'))
for kind in ('failed', 'skipped'):
    if counts[kind]:
        print('sanity %s: %s' % (kind, ', '.join(counts[kind])))
print('sanity: %d passed, %d failed, %d skipped' % (len(counts['passed']), len(counts['failed']), len(counts['skipped'])))
EOF
)
echo "$summary"
if [ "$status" -eq 0 ] && ! grep -q '^sanity: [1-9][0-9]* passed, 0 failed' <<<"$summary"; then
  echo "error: ansible-test exited 0 but no sanity test passed" >&2
  status=1
fi
exit "$status"
