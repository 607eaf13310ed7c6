"""ephemera.workspaces.workspace_template's default toolset: declared once, documented as declared, and installable
from Debian's mirror, the npm registry and PyPI alone (tests/integration/template/test_toolset.py installs it)."""

import shlex

import pytest
import yaml

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import template as provisioning
from ansible_collections.ephemera.workspaces.plugins.modules import workspace_template

LISTS = ('packages', 'npm_packages', 'agent_commands', 'tools')


@pytest.mark.parametrize('option', LISTS)
def test_the_documented_default_is_the_declared_one(option):
    documented = yaml.safe_load(workspace_template.DOCUMENTATION)['options'][option]['default']
    assert documented == workspace_template.argument_spec()[option]['default']


def test_the_defaults_pass_the_builds_own_check():
    spec = workspace_template.argument_spec()
    tools = [t if isinstance(t, dict) else {'name': t} for t in spec['tools']['default']]
    provisioning.check_spec(spec['packages']['default'], spec['npm_packages']['default'],
                            spec['agent_commands']['default'], tools, 'agent')


def test_the_default_commands_fetch_nothing_but_from_pypi():
    """No installer script from a web site: uv comes from PyPI through pip, Rust from Debian's packages."""
    commands = workspace_template.DEFAULT_COMMANDS
    for command in commands:
        words = shlex.split(command)
        assert 'curl' not in words and 'wget' not in words and not any('://' in w for w in words), command
    assert any('pip install' in command and ' uv' in command for command in commands)
    assert {'rustc', 'cargo', 'python3-venv'} <= set(workspace_template.DEFAULT_PACKAGES)


def test_every_default_tool_is_asked_the_way_it_answers():
    """Go has no --version flag (it answers "flag provided but not defined"); the SDK has no command: npm says which
    version of it is installed, on its first line."""
    tools = dict((t['name'], t['command']) if isinstance(t, dict) else (t, None)
                 for t in workspace_template.DEFAULT_TOOLS)
    assert tools['go'] == 'go version'
    assert '--parseable --long @anthropic-ai/claude-agent-sdk' in tools['claude-agent-sdk']
    assert set(tools) >= {'claude', 'codex', 'opencode', 'uv', 'rustc', 'cargo', 'node', 'bun', 'pnpm'}


def test_the_agent_script_installs_the_npm_packages_then_runs_the_commands():
    script = provisioning.agent_script(workspace_template.DEFAULT_NPM, workspace_template.DEFAULT_COMMANDS)
    lines = script.splitlines()
    assert lines[0] == 'set -e'
    npm = [n for n, line in enumerate(lines) if line.startswith('npm install --global --prefix "$HOME/.local"')]
    uv = [n for n, line in enumerate(lines) if 'venvs/uv' in line]
    assert len(npm) == 1 and len(uv) == 1 and npm[0] < uv[0]
    for package in workspace_template.DEFAULT_NPM:
        assert shlex.quote(package) in lines[npm[0]]
