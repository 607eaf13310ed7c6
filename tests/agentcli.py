"""The real agent CLIs (claude-code, codex, opencode) for tests, installed once into a cache outside the checkout.

    from tests.agentcli import ensure_clis
    bin_dir = ensure_clis(announce=print)      # .../clis-<hash>/bin with claude, codex, opencode

    python -m tests.agentcli ensure            # prints the bin directory (for make and scripts)

The cache is $EPHEMERA_AGENT_CACHE, else /var/cache/ephemera-agents as root, else ~/.cache/ephemera-agents. In it
each pinned set gets a directory named by a hash of the set, built under an exclusive file lock in a temporary
directory beside it and renamed into place only once all three CLIs answer --version: parallel pytest workers
build once, and a build that died leaves only a ``.build-*`` directory that the next build removes. npm's own
cache (the downloaded tarballs) is the cache's ``npm`` directory.

Install scripts: npm 11 runs a dependency's install scripts with a warning unless allowScripts covers them
(``--strict-allow-scripts`` makes that an error). claude-code's ``postinstall`` puts its native binary in place of
the placeholder ``bin/claude.exe``, and opencode-ai's ``postinstall`` does the same for ``bin/opencode.exe``:
installed with ``--ignore-scripts`` both refuse to start ("claude native binary not installed", "opencode-ai's
postinstall script was not run"). codex has no install script. So the two are allowed by name, and
``--strict-allow-scripts`` fails the install if any other package ever brings one.
"""

import argparse
import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# The versions the tests run, pinned exactly. Node 20 is what the machine has:
# - @anthropic-ai/claude-code 2.1.332: its package says engines node >= 22, but the CLI is a native binary (from
#   the optional dependency @anthropic-ai/claude-code-linux-x64) that does not run on node; npm only warns.
# - @openai/codex 0.171.0: a node (>= 16) launcher of the native codex binary shipped in the package.
# - opencode-ai 1.18.33: a native binary from the optional dependency opencode-linux-x64 (or -baseline).
PINNED = {
    '@anthropic-ai/claude-code': '2.1.332',
    '@openai/codex': '0.171.0',
    'opencode-ai': '1.18.33',
}
# The packages whose install scripts must run (see above); any other one with a script fails the install.
ALLOW_SCRIPTS = ('@anthropic-ai/claude-code', 'opencode-ai')
# What each CLI prints to --version, by executable.
VERSIONS = {
    'claude': PINNED['@anthropic-ai/claude-code'],
    'codex': PINNED['@openai/codex'],
    'opencode': PINNED['opencode-ai'],
}
INSTALL_TIMEOUT = 900
VERSION_TIMEOUT = 60


class InstallError(RuntimeError):
    """The CLIs could not be installed or do not start."""


def cache_root():
    """Where the CLIs are cached: $EPHEMERA_AGENT_CACHE, /var/cache/ephemera-agents as root, else ~/.cache/..."""
    explicit = os.environ.get('EPHEMERA_AGENT_CACHE')
    if explicit:
        return os.path.abspath(explicit)
    if os.geteuid() == 0:
        return '/var/cache/ephemera-agents'
    return os.path.join(os.path.expanduser('~'), '.cache', 'ephemera-agents')


def pinned_hash():
    """A short hash of the pinned set and how it is installed: a change builds a new directory."""
    data = json.dumps({'pinned': PINNED, 'allow_scripts': list(ALLOW_SCRIPTS)}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def install_dir():
    return os.path.join(cache_root(), 'clis-%s' % pinned_hash())


def _complete(prefix):
    return os.path.isfile(os.path.join(prefix, '.complete'))


def check_versions(bin_dir):
    """Each CLI in ``bin_dir`` answers --version with its pinned version (run with a throwaway HOME)."""
    home = tempfile.mkdtemp(prefix='agentcli-home-')
    try:
        env = dict(os.environ, HOME=home, DISABLE_AUTOUPDATER='1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC='1',
                   NO_COLOR='1')
        for name, version in sorted(VERSIONS.items()):
            path = os.path.join(bin_dir, name)
            try:
                done = subprocess.run([path, '--version'], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                      text=True, timeout=VERSION_TIMEOUT, check=False)
            except (OSError, subprocess.TimeoutExpired) as err:
                raise InstallError('%s --version did not answer: %s' % (path, err))
            if done.returncode != 0 or version not in done.stdout:
                raise InstallError('%s --version: exit %d, %r %r (wanted %s)' % (
                    path, done.returncode, done.stdout.strip()[-300:], done.stderr.strip()[-300:], version))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _npm_install(prefix, npm_cache, announce):
    os.makedirs(os.path.join(prefix, 'lib'))  # npm's --strict-allow-scripts check wants the global lib dir
    specs = ['%s@%s' % (name, version) for name, version in sorted(PINNED.items())]
    argv = ['npm', 'install', '--global', '--prefix', prefix, '--cache', npm_cache, '--no-audit', '--no-fund',
            '--no-update-notifier', '--allow-scripts=%s' % ','.join(ALLOW_SCRIPTS), '--strict-allow-scripts'] + specs
    announce('agentcli: %s' % ' '.join(argv))
    env = dict(os.environ, npm_config_update_notifier='false', npm_config_loglevel='error')
    try:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise InstallError('npm install failed to finish: %s' % err)
    if done.returncode != 0:
        raise InstallError('npm install exited %d:\n%s\n%s' % (done.returncode, done.stdout[-3000:],
                                                               done.stderr[-3000:]))


def ensure_clis(announce=None):
    """The bin directory holding claude, codex and opencode at their pinned versions, installing them first if
    this pinned set is not in the cache yet. ``announce`` (a callable taking a line) hears about an install."""
    announce = announce or (lambda line: None)
    prefix = install_dir()
    bin_dir = os.path.join(prefix, 'bin')
    if _complete(prefix):
        return bin_dir
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, '.lock-%s' % pinned_hash()), 'a+') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(prefix):
            return bin_dir
        # Under the lock no other build of this set runs: what is left of one died.
        for stale in glob.glob(os.path.join(root, '.build-%s-*' % pinned_hash())):
            shutil.rmtree(stale, ignore_errors=True)
        if os.path.exists(prefix):
            shutil.rmtree(prefix)
        started = time.monotonic()
        announce('agentcli: installing %s into %s' % (', '.join('%s@%s' % i for i in sorted(PINNED.items())),
                                                      prefix))
        build = tempfile.mkdtemp(prefix='.build-%s-' % pinned_hash(), dir=root)
        try:
            staged = os.path.join(build, 'prefix')
            _npm_install(staged, os.path.join(root, 'npm'), announce)
            check_versions(os.path.join(staged, 'bin'))
            with open(os.path.join(staged, '.complete'), 'w', encoding='utf-8') as out:
                json.dump({'pinned': PINNED, 'installed_at': time.time()}, out)
            os.rename(staged, prefix)
        finally:
            shutil.rmtree(build, ignore_errors=True)
        announce('agentcli: installed in %.0fs' % (time.monotonic() - started))
    return bin_dir


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tests.agentcli')
    sub = parser.add_subparsers(dest='command', required=True)
    sub.add_parser('ensure', help='install the pinned CLIs if needed; print their bin directory')
    sub.add_parser('versions', help='print the pinned versions as JSON')
    args = parser.parse_args(argv)
    if args.command == 'versions':
        print(json.dumps(PINNED, indent=2))
        return 0
    try:
        print(ensure_clis(announce=lambda line: print(line, file=sys.stderr, flush=True)))
    except InstallError as err:
        print('agentcli: %s' % err, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
