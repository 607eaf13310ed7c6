"""Plain facts the docs and file headers state, checked against the tree: the license file they name exists, the
providers the README and the option tables name are the ones the collection ships, a multi-word purpose is never
shown as -e purpose=..., and no stand-in agent pastes the purpose into a shell script's text."""

import os
import re
import subprocess

import yaml

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import PROVIDERS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tracked():
    out = subprocess.run(['git', '-C', ROOT, 'ls-files', '-z'], stdout=subprocess.PIPE, check=True).stdout
    return [name for name in out.decode().split('\0') if name]


def read(name):
    with open(os.path.join(ROOT, name), encoding='utf-8', errors='replace') as handle:
        return handle.read()


def test_file_headers_name_the_license_file_that_exists():
    assert os.path.exists(os.path.join(ROOT, 'LICENSE')) and not os.path.exists(os.path.join(ROOT, 'COPYING'))
    naming = [name for name in tracked() if name.endswith('.py') and 'see ' + 'COPYING' in read(name)]
    assert naming == []


def test_the_readme_and_the_option_table_name_every_shipped_provider():
    readme = read('README.md')
    assert 'under way' not in readme.split('## ', 1)[0]
    for name in ('Hetzner Cloud', 'Compute Engine', 'Azure', 'AWS'):
        assert name in readme.split('## ', 1)[0], name
    row = [line for line in read('docs/aws.md').splitlines() if line.startswith('| `provider` |')][0]
    assert set(re.findall(r'`(\w+)`', row.split('|')[4])) == set(PROVIDERS), row


def test_no_doc_shows_a_purpose_as_a_bare_extra_var():
    for name in tracked():
        if name.endswith('.md') and not name.startswith('changelogs/'):
            for line in read(name).splitlines():
                assert not re.search(r'-e purpose=(?!")[^ `]*', line) or 'would keep only' in line or \
                    'does not do what' in line, (name, line)


def test_no_stand_in_agent_pastes_the_purpose_into_a_shell_scripts_text():
    for name in tracked():
        if name.endswith(('.yml', '.yaml')) and not name.startswith('tests/'):
            data = read(name)
            if '{purpose}' not in data:
                continue
            for match in re.finditer(r'\[sh, -c, (\'[^\']*\'|"[^"]*")', data):
                assert '{purpose}' not in match.group(1), (name, match.group(0))
    agents = yaml.safe_load(read('extensions/molecule/host_vars/localhost.yml'))['ephemera_agents']
    assert agents['fake'][-1] == '{purpose}' and '{purpose}' not in agents['fake'][2]


def test_the_quickstart_pages_set_only_options_the_modules_have():
    """Every ephemera_<option> variable the quick start pages' group variables set is an option of workspace_create
    (where the in-process action plugins take it from)."""
    from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import module_file
    options = set(module_file('workspace_create').module_args()['argument_spec'])
    pages = [name for name in tracked() if name.startswith('docs/quickstart-') and name.endswith('.md')]
    assert len(pages) == 5, pages
    for name in pages:
        blocks = re.findall(r'```yaml\n(.*?)\n```', read(name), re.S)
        assert blocks, name
        for block in blocks:
            for key in yaml.safe_load(block):
                assert key.startswith('ephemera_') and key[len('ephemera_'):] in options, (name, key)
        # The variables the text names (`ephemera_pool`, ...) as well.
        for key in re.findall(r'`(ephemera_[a-z0-9_]+)`', read(name)):
            assert key[len('ephemera_'):] in options, (name, key)
