# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a template build runs in its candidate guest: provision, verify, clean.

Provisioning installs the system packages as root and makes one non-root agent user; the agent's own
tooling (npm packages, agent commands such as the default one that installs uv from PyPI) is installed *as that
user*, under its home (``~/.local``), so that it is on the agent's PATH: a login of the agent user (``~/.profile``
puts ``~/.local/bin`` first once it exists), which is how verification runs and how the agent runner starts the
agent. Tooling installed as root under ``/root`` would be invisible to all of it.

Verification runs every listed tool as the agent user in a login shell and records the first line it
answers with; cleaning removes what a template must not carry into every workspace made from it.
"""

import re
import shlex

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

# Debian package names (policy 5.6.1), npm package specs (with a scope and a version), a user name.
PACKAGE = re.compile(r'^[a-z0-9][a-z0-9+.-]+$')
NPM_PACKAGE = re.compile(r'^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9._^~<>=*-]+)?$')
USER = re.compile(r'^[a-z_][a-z0-9_-]{0,31}$')
TOOL = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$')
# What a verified tool's answer keeps: its first line, this long.
VERSION_CHARS = 200
# Host keys a template must not carry: every workspace made from it would answer with the same key.
HOST_KEYS = '/etc/ssh/ssh_host_*'
# The repository every template carries for its build's smoke create (the template_build role's default
# template_build_smoke): one commit on branch main, readable by every user, made by provisioning when git is there.
SMOKE_REPO = '/usr/local/share/ephemera/smoke.git'
# Regenerates missing host keys at a clone's first boot, before sshd starts (systemd guests).
FIRST_BOOT_UNIT = '/etc/systemd/system/ephemera-ssh-host-keys.service'
FIRST_BOOT_UNIT_TEXT = """\
[Unit]
Description=Make this guest's own SSH host keys (a template carries none)
Before=ssh.service
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""


class ProvisionError(EphemeraError):
    """A provisioning, verification or cleaning command failed; the message names it and says what to do."""


def q(value):
    return shlex.quote(str(value))


def check_spec(packages, npm_packages, agent_commands, tools, agent_user):
    """Refuse a package list, tool list or user name that cannot be what it says, before anything is cloned."""
    bad = [p for p in packages if not isinstance(p, str) or not PACKAGE.match(p)]
    if bad:
        raise ProvisionError('Package name(s) %s are not Debian package names (lower-case letters, digits, "+", "-" '
                             'and ".").' % ', '.join(repr(p) for p in bad))
    bad = [p for p in npm_packages if not isinstance(p, str) or not NPM_PACKAGE.match(p)]
    if bad:
        raise ProvisionError('npm package(s) %s are not npm package specs (name, @scope/name, name@version).'
                             % ', '.join(repr(p) for p in bad))
    bad = [c for c in agent_commands if not isinstance(c, str) or not c.strip() or '\x00' in c]
    if bad:
        raise ProvisionError('agent_commands must be non-empty shell command lines; got %r.' % (bad,))
    for tool in tools:
        if not isinstance(tool, dict) or not TOOL.match(str(tool.get('name') or '')):
            raise ProvisionError('Each tool is {name, command}: a name of letters, digits and "._+-" and the command '
                                 'that prints its version (default "<name> --version"); got %r.' % (tool,))
    if not USER.match(agent_user or '') or agent_user == 'root':
        raise ProvisionError('agent_user %r: give the name of a non-root user (lower-case letters, digits, "_", "-").'
                             % (agent_user,))


def as_agent_login(agent_user, command):
    """``command`` run as the agent user in a login shell: the agent's own PATH, home and profile."""
    return 'runuser -l %s -c %s' % (q(agent_user), q(command))


def smoke_repo_lines(agent_user):
    """Shell lines that make SMOKE_REPO afresh (a rerun of provisioning makes it again), when git is installed: the
    smoke create of the build clones it inside the guest, so it needs no network and no credentials. It belongs to
    the agent user, who checks it out: git refuses a repository of another owner ("dubious ownership")."""
    git = 'git -c user.name=ephemera -c user.email=ephemera@localhost -c init.defaultBranch=main'
    return [
        'if command -v git >/dev/null 2>&1; then',
        '  rm -rf %s' % q(SMOKE_REPO),
        '  smoke=$(mktemp -d)',
        '  %s -C "$smoke" init -q' % git,
        '  printf "Smoke test repository of this template: a workspace made from it checks it out.\\n" '
        '> "$smoke/README"',
        '  %s -C "$smoke" add README' % git,
        '  %s -C "$smoke" commit -q -m "Smoke test repository"' % git,
        '  mkdir -p %s' % q(SMOKE_REPO.rsplit('/', 1)[0]),
        '  git clone -q --bare "$smoke" %s' % q(SMOKE_REPO),
        '  chown -R %s: %s' % (q(agent_user), q(SMOKE_REPO)),
        '  rm -rf "$smoke"',
        'fi',
    ]


def provision_script(packages, agent_user):
    """Root's part: the system packages, the agent user (made if missing, its ~/.local/bin ready) and the smoke
    repository (SMOKE_REPO)."""
    lines = ['set -e', 'export DEBIAN_FRONTEND=noninteractive']
    if packages:
        lines += ['apt-get update -q',
                  'apt-get install -y -q --no-install-recommends %s' % ' '.join(q(p) for p in packages)]
    lines += [
        'id -u %s >/dev/null 2>&1 || useradd --create-home --shell /bin/bash %s' % (q(agent_user), q(agent_user)),
        'home=$(getent passwd %s | cut -d: -f6)' % q(agent_user),
        'runuser -u %s -- mkdir -p "$home/.local/bin"' % q(agent_user),
    ] + smoke_repo_lines(agent_user)
    return '\n'.join(lines) + '\n'


def agent_script(npm_packages, agent_commands):
    """The agent's part, run as the agent in a login shell: npm packages under ~/.local, then its commands."""
    lines = ['set -e', 'cd "$HOME"']
    if npm_packages:
        lines.append('npm install --global --prefix "$HOME/.local" --no-audit --no-fund --loglevel=error %s'
                     % ' '.join(q(p) for p in npm_packages))
    lines += list(agent_commands)
    return '\n'.join(lines) + '\n'


def provision(guest, packages, npm_packages, agent_commands, agent_user, timeout):
    """Provision the candidate: root installs packages and makes the agent user; the agent installs its tooling.

    A failing command raises ProvisionError with the tail of its output.
    """
    root = guest.run('sh -s', stdin=provision_script(packages, agent_user), timeout=timeout, check=False,
                     what='provision as root')
    if root.rc != 0:
        raise ProvisionError('Provisioning as root failed (exit %d): %s. Check the package names (apt-cache policy '
                             'NAME on a Debian %s guest) and the guest\'s apt sources, then build again.'
                             % (root.rc, _tail(root), 'bookworm'), output=_tail(root))
    if npm_packages or agent_commands:
        agent = guest.run(as_agent_login(agent_user, 'sh -s'), stdin=agent_script(npm_packages, agent_commands),
                          timeout=timeout, check=False, what='provision as the agent user')
        if agent.rc != 0:
            raise ProvisionError('Installing the agent tooling as %s failed (exit %d): %s. Check the npm package names '
                                 'and agent_commands (they run as %s in a login shell), then build again.'
                                 % (agent_user, agent.rc, _tail(agent), agent_user), output=_tail(agent))


def verify(guest, tools, agent_user, timeout):
    """{tool: first line of its version answer}, every tool run as the agent user in a login shell.

    Every tool is asked; ProvisionError lists every one that did not answer.
    """
    script = ['for_tool() { out=$(sh -c "$2" 2>&1 </dev/null); rc=$?; '
              'printf "%s\\t%s\\t%s\\n" "$1" "$rc" "$(printf %s "$out" | head -n 1 | tr "\\t" " ")"; }']
    for tool in tools:
        command = tool.get('command') or '%s --version' % tool['name']
        script.append('for_tool %s %s' % (q(tool['name']), q(command)))
    result = guest.run(as_agent_login(agent_user, 'sh -s'), stdin='\n'.join(script) + '\n', timeout=timeout,
                       check=False, what='verify the tools')
    versions, missing = {}, []
    answered = {}
    for line in result.stdout.splitlines():
        parts = line.split('\t', 2)
        if len(parts) == 3 and parts[1].isdigit():
            answered[parts[0]] = (int(parts[1]), parts[2].strip()[:VERSION_CHARS])
    for tool in tools:
        rc, text = answered.get(tool['name'], (None, ''))
        if rc == 0 and text:
            versions[tool['name']] = text
        else:
            missing.append('%s (%s)' % (tool['name'], 'exit %s: %s' % (rc, text or 'no output') if rc is not None
                                        else 'not run'))
    if result.rc != 0 and not answered:
        raise ProvisionError('Verifying the tools as %s failed (exit %d): %s.' % (agent_user, result.rc, _tail(result)))
    if missing:
        raise ProvisionError('Tool(s) did not answer as %s in a login shell: %s. Install them as that user (npm '
                             'packages, agent_commands) or as packages, then build again.'
                             % (agent_user, '; '.join(missing)), versions=versions, missing=missing)
    return versions


def clean_script(agent_user, checkout_path, state_dir):
    """What must not reach the workspaces: a repository, credentials, shell histories, host keys, the machine id,
    package caches. Host keys come back at each clone's first boot (FIRST_BOOT_UNIT), before sshd starts."""
    return '\n'.join([
        'set -e',
        'home=$(getent passwd %s | cut -d: -f6)' % q(agent_user),
        'rm -rf %s %s' % (q(checkout_path), q(state_dir)),
        'rm -f /root/.bash_history /root/.python_history /root/.lesshst /root/.viminfo /root/.wget-hsts '
        '"$home/.bash_history" "$home/.python_history" "$home/.lesshst" "$home/.viminfo" "$home/.wget-hsts"',
        'rm -rf /root/.cache /root/.npm "$home/.cache" "$home/.npm" "$home/.config/gh" "$home/.git-credentials" '
        '/root/.git-credentials',
        'apt-get clean',
        'rm -rf /var/lib/apt/lists/* /tmp/* /var/tmp/*',
        'rm -f %s' % HOST_KEYS,
        'if [ -d /etc/systemd/system ]; then',
        "  cat > %s <<'UNIT'" % FIRST_BOOT_UNIT,
        FIRST_BOOT_UNIT_TEXT.rstrip('\n'),
        'UNIT',
        '  mkdir -p /etc/systemd/system/multi-user.target.wants',
        '  ln -sf %s /etc/systemd/system/multi-user.target.wants/' % FIRST_BOOT_UNIT,
        'fi',
        ': > /etc/machine-id',
        'rm -f /var/lib/dbus/machine-id',
    ]) + '\n'


def clean(guest, agent_user, checkout_path, state_dir, timeout):
    result = guest.run('sh -s', stdin=clean_script(agent_user, checkout_path, state_dir), timeout=timeout, check=False,
                       what='clean the template')
    if result.rc != 0:
        raise ProvisionError('Cleaning the candidate failed (exit %d): %s.' % (result.rc, _tail(result)))


def _tail(result, lines=8):
    text = (result.stderr or '').strip() or (result.stdout or '').strip()
    return ' | '.join(text.splitlines()[-lines:]) or 'no output'
