#!/usr/bin/env bash
# Make sure the system packages the tests and the try-out cluster need are present.
# As root on Debian they are installed with apt-get; otherwise the first missing one is named
# together with the command that installs it, and nothing else happens.
set -euo pipefail

# command -> Debian package that provides it
declare -A needs=(
  [git]=git
  [sshd]=openssh-server
  [ssh-keygen]=openssh-client
  [shellcheck]=shellcheck   # ansible-test sanity skips its shellcheck test without it
  [debootstrap]=debootstrap # the try-out cluster's debian guest tier builds its base root with it
)
find_cmd() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

missing=()
for cmd in "${!needs[@]}"; do
  find_cmd "$cmd" || missing+=("${needs[$cmd]}")
done
# The tests start PostgreSQL servers of their own (tests/pgserver.py) from the server package's programs.
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql-15)
[ ${#missing[@]} -eq 0 ] && exit 0

# shellcheck disable=SC2207
missing=($(printf '%s\n' "${missing[@]}" | sort -u))
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system package(s): ${missing[*]}" >&2
  echo "install with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
