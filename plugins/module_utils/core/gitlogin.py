# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a git token reaches git, wherever git runs (the controller's probe, the guest's clone, the archive push).

- A token goes only to an ``https://`` repository (or ``http://`` to a loopback address, where the
  plain text never crosses a network): ``http://`` elsewhere would send it readable to anyone on the
  path, ``git://`` and SSH URLs cannot use it at all. :func:`check_token_transport` refuses the rest.
- git asks a helper (``GIT_ASKPASS``) for the user name and the password. The helper holds no secret:
  it answers only the two questions git asks for the request's own scheme, host and port, with the
  values from its environment, and refuses every other question (another host after a redirect, an
  SSH passphrase). The token therefore lives only in the environment of the git that asks.
- git runs with no system or global configuration and no credential helpers, and with a token it
  follows no HTTP redirect.
"""

import ipaddress
import re

# A static helper: no token in it, so it may be readable by anyone who may run it.
ASKPASS = """#!/bin/sh
# Answers git's two questions for one origin only; the answers come from the environment of the git that asks.
if [ -n "${EPHEMERA_GIT_ASK_USER:-}" ] && [ "$1" = "$EPHEMERA_GIT_ASK_USER" ]; then
    printf '%s\\n' "$EPHEMERA_GIT_USERNAME"; exit 0
fi
if [ -n "${EPHEMERA_GIT_ASK_PASS:-}" ] && [ "$1" = "$EPHEMERA_GIT_ASK_PASS" ]; then
    printf '%s\\n' "$EPHEMERA_GIT_TOKEN"; exit 0
fi
echo "ephemera: no credentials for: $1" >&2
exit 1
"""

# git options for every command that may reach the remote: no credential helper from anywhere.
NO_HELPERS = ['-c', 'credential.helper=']
# With a token: no redirect is followed (one could lead to another host).
NO_REDIRECTS = ['-c', 'http.followRedirects=false']
# The environment that keeps the system's and the user's git configuration out.
ISOLATED_ENV = {'GIT_CONFIG_NOSYSTEM': '1', 'GIT_CONFIG_GLOBAL': '/dev/null', 'GIT_TERMINAL_PROMPT': '0',
                'GIT_NO_REPLACE_OBJECTS': '1'}

_URL = re.compile(r'^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?:(?P<userinfo>[^/?#@]*)@)?(?P<hostport>[^/?#]*)')


class GitLoginError(ValueError):
    """A token would travel where it must not; the message says what to do."""


def origin(url):
    """(scheme lower-cased, host[:port] as written) of an URL, or (None, None) for a path or scp-like address."""
    match = _URL.match(url or '')
    if not match:
        return None, None
    return match.group('scheme').lower(), match.group('hostport')


def _host(hostport):
    if hostport.startswith('['):
        return hostport[1:].split(']', 1)[0]
    return hostport.rsplit(':', 1)[0] if hostport.count(':') == 1 else hostport


def is_loopback(hostport):
    host = _host(hostport)
    if host.lower() == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_transport(url, token):
    """Refuse (GitLoginError) a token for a repository it cannot safely reach; nothing without a token."""
    if not token:
        return
    scheme, hostport = origin(url)
    if scheme == 'https' and hostport:
        return
    if scheme == 'http' and hostport and is_loopback(hostport):
        return
    if scheme == 'http':
        why = 'http:// sends it in plain text to anyone between here and %s, and a redirect could hand it on' % hostport
    elif scheme in ('git',):
        why = 'the git:// protocol has no login, so it would be sent nowhere useful'
    else:
        why = 'a path or an SSH address logs in with keys, never with a token'
    raise GitLoginError('A git_token is sent only to an https:// repository, not to %s: %s. Use the https:// URL '
                        'of the repository, or leave git_token out for a repository that needs none.' % (url, why))


def askpass_env(url, username, token):
    """The environment for the helper: the exact questions it answers for ``url``, and the answers."""
    scheme, hostport = origin(url)
    user = username or 'git'
    return {
        'EPHEMERA_GIT_ASK_USER': "Username for '%s://%s': " % (scheme, hostport),
        'EPHEMERA_GIT_ASK_PASS': "Password for '%s://%s@%s': " % (scheme, user, hostport),
        'EPHEMERA_GIT_USERNAME': user,
        'EPHEMERA_GIT_TOKEN': token,
    }
