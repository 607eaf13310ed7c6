#!/usr/bin/env bash
# Build the collection tarball from a clean list: the files git tracks, as they are in this checkout.
#
#   scripts/build-collection.sh [OUTPUT_DIR]        (default: build/; make collection runs it)
#
# Whatever else a checkout holds never reaches the tarball, whatever its name: the state of `make demo` or of
# the try-out cluster (a journal, its controller secret, a CA key, SSH private keys), virtualenvs, archives,
# caches. galaxy.yml's manifest (an allow-list) then takes only the tracked files meant to ship.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build}
galaxy=${ANSIBLE_GALAXY:-$top/.venv/bin/ansible-galaxy}
[ -x "$galaxy" ] || galaxy=$(command -v ansible-galaxy)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Tracked files that exist (one deleted in the checkout but not yet in git is left out).
git -C "$top" ls-files -z --cached | (cd "$top" && while IFS= read -r -d '' path; do
  [ -f "$path" ] && printf '%s\0' "$path"
done) | tar -C "$top" --null -T - -cf - | tar -C "$stage" -xf -
mkdir -p "$out"
"$galaxy" collection build --force --output-path "$out" "$stage"
