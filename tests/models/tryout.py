"""What a try-out site (tests/localpve, tests/localcloud) tells the collection about its agents: the model stand-in's
URL per agent, keys that stand-in takes (any key: its default script answers every one), and where the real CLIs
are. The try-out inventories read it from the site's info file (cluster.json, cloud.json)."""

import os
import pwd

# Not secrets: the try-out model endpoint is a stand-in on loopback that takes any key. Real keys come from a vault
# or an AWX credential (docs/agents.md).
TRYOUT_CREDENTIALS = {'ANTHROPIC_API_KEY': 'tryout-anthropic-key', 'OPENAI_API_KEY': 'tryout-openai-key'}
CLIS = ('claude', 'codex', 'opencode')


def agent_settings(model_url, bin_dir=None):
    return {'model_url': model_url,
            'base_urls': {'claude-code': model_url, 'codex': model_url + '/v1', 'opencode': model_url + '/v1'},
            'credentials': dict(TRYOUT_CREDENTIALS), 'bin': bin_dir}


def link_clis(root, user, bin_dir):
    """Put the CLIs of ``bin_dir`` into ``user``'s ~/.local/bin under a guest's ``root`` (the host tier's guests share
    this machine's users: the agent's home is its passwd home under the guest's root)."""
    home = pwd.getpwnam(user).pw_dir
    local = os.path.join(root, home.lstrip('/'), '.local', 'bin')
    os.makedirs(local, exist_ok=True)
    for name in CLIS:
        path = os.path.join(local, name)
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(os.path.join(bin_dir, name), path)
    return local
