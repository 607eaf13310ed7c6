# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:
    """How unsaved work is archived: the options of workspace_archive, and of workspace_destroy's guard step."""

    DOCUMENTATION = r'''
options:
  archive_dir:
    description:
      - Directory on the controller that receives archives. Made (mode 0700) when missing; checked writable before
        anything else is done.
      - If not set, the environment variable E(EPHEMERA_ARCHIVE_DIR); if that is not set either, C(archives) next to
        the journal, or for a journal in PostgreSQL (O(journal_url)) C($XDG_STATE_HOME/ephemera/archives)
        (C(~/.local/state/ephemera/archives) without E(XDG_STATE_HOME)). In AWX, give a directory that outlives the
        job.
    type: path
  push:
    description:
      - Push a commit of everything to the workspace's own branch when the remote accepts it. Off, or refused, means a
        bundle and patches are captured instead.
    type: bool
    default: true
  push_remote:
    description:
      - Not used any more, kept so that existing tasks still validate. The push goes to the workspace's repository
        as the journal records it (the create request's O(ephemera.workspaces.workspace_create#module:repo)), never
        to a remote or URL from the checkout's own configuration, which the agent controls.
    type: str
    default: origin
  push_prefix:
    description:
      - Prefix of the branch the archive is pushed to, C(<push_prefix><name>). A branch of that name that holds a commit
        this workspace did not push is never overwritten; the archive falls back to a bundle and patches.
    type: str
    default: ephemera/
  include_untracked:
    description:
      - Git pathspecs (shell globs in which C(*) also matches C(/)) of untracked files to copy into C(untracked.tar)
        when they are not pushed, for example C(['*.md', 'notes/*']). Ignored files match too.
      - Symbolic links are stored as links, never followed.
    type: list
    elements: str
    default: []
  git_token:
    description:
      - Token for pushing to an C(https://) repository (or C(http://) to a loopback address); refused for any other URL.
      - It travels on the standard input of root's push command into git's environment, for a helper that holds no
        secret and answers only for the repository's own origin; git follows no redirect. It is written to no file.
    type: str
  git_username:
    description: User name sent with O(git_token).
    type: str
    default: git
  ssh_private_key:
    description:
      - Private key for SSH to the guest. If not set, the key recorded when the workspace was created; if none was,
        the keys of the ssh-agent that E(SSH_AUTH_SOCK) names.
    type: path
  ssh_timeout:
    description: Seconds to keep trying SSH to the guest, with backoff.
    type: int
    default: 30
  command_timeout:
    description: Seconds a git command in the guest may take (inspection, bundle, patches).
    type: int
    default: 600
  push_timeout:
    description: Seconds the push (and the look at the remote before it) may take.
    type: int
    default: 300
'''
