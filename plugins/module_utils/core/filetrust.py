# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a file the controller trusts (the journal, its directory, the controller secret) is its own.

The journal says where a workspace's SSH server is, which host key to expect and which agent command lines a
resumed create runs; the secret signs ownership markers. Whoever can change either decides what this controller
does. So a writer refuses a journal, a write-ahead log or a secret that another user owns or that others may
write, and a directory others may write (they could put their own journal, log or secret in its place); the
secret must not be readable by others either. Readers (the inventory, the lookup, workspace_info) may read
another user's journal, as designed, but never one that others than its owner may write.
"""

import os
import stat

WHY = 'whoever can change it decides which addresses, host keys and commands this controller trusts'


def problems(st, owner=True, private=False, directory=False):
    """What is wrong with a file or directory (its stat) that this controller is to trust: a list of phrases.

    ``owner``: it must belong to the user running Ansible; ``private``: others must not read it either.
    """
    found = []
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        found.append('it is not a %s' % ('directory' if directory else 'regular file'))
    # root's own files are trusted: root could change anything anyway.
    if owner and st.st_uid not in (os.geteuid(), 0):
        found.append('it is owned by uid %d, not by uid %d who runs Ansible' % (st.st_uid, os.geteuid()))
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        found.append('others may write it (mode %04o)' % mode)
    elif private and mode & 0o044:
        found.append('others may read it (mode %04o)' % mode)
    return found


def refusal(path, what, found, fix):
    """The message that refuses ``path`` for the ``found`` problems, with what to do."""
    return ('%s %s is not safe to trust: %s; %s. Check that nobody tampered with it, then %s.'
            % (what, path, ' and '.join(found), WHY, fix))


def check(path, what, owner=True, private=False, directory=False, fix=None):
    """None when ``path`` is fine (or does not exist), else the message that refuses it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    found = problems(st, owner=owner, private=private, directory=directory)
    if not found:
        return None
    if fix is None:
        fix = ('make it yours and not writable by others (chown; chmod go-w %s)' % path if directory else
               'make it yours with mode 0600 (chown; chmod 600 %s)' % path)
    return refusal(path, what, found, fix)
