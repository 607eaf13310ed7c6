#!/usr/bin/env bash
# scripts/core-venv.sh VERSION DIR [PYTHON]: a virtualenv in DIR with the newest ansible-core VERSION.x release and the
# collection's runtime requirements (requirements-ee.txt: what an execution environment holds), made with PYTHON
# (python3 by default). Made once: a stamp names what was installed, and a venv whose stamp still matches is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/core-venv.sh VERSION DIR [PYTHON]}
dir=${2:?usage: scripts/core-venv.sh VERSION DIR [PYTHON]}
python=${3:-python3}
if ! [[ $version =~ ^([0-9]+)\.([0-9]+)$ ]]; then
    echo "core-venv: VERSION is major.minor, as 2.17; not '$version'" >&2
    exit 2
fi
spec="ansible-core>=$version.0,<${BASH_REMATCH[1]}.$((BASH_REMATCH[2] + 1))"
want="$spec $(sha256sum < requirements-ee.txt | cut -c1-16)"
if [ -x "$dir/bin/ansible" ] && [ "$(cat "$dir/.installed" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
"$python" -m venv --clear "$dir"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$spec" -r requirements-ee.txt
echo "$want" > "$dir/.installed"
echo "core-venv: ansible-core $("$dir/bin/python" -c 'import ansible.release as r; print(r.__version__)') in $dir"
