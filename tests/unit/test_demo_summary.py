"""make demo's summary of the workspace (scripts/demo_summary.py) and the try-out cloud's start-up lines: a few
readable lines per provider, no record's JSON, no other provider's banner."""

import contextlib
import io
import os
import runpy
import types

import pytest

from tests.localcloud import cli as cloud_cli
from tests.localpve.config import ROOT

summary = runpy.run_path(os.path.join(ROOT, 'scripts', 'demo_summary.py'))['summary']


@pytest.mark.parametrize('provider, resource, location', [
    ('proxmox', 100, 'pve1'), ('aws', 'i-0abc', 'us-east-1a'), ('hetzner', '4711', 'fsn1'),
    ('gcp', 'ws-demo', 'europe-west1-b'), ('azure', 'ephemera-demo', 'westeurope')])
def test_the_summary_names_the_resource_the_ssh_command_and_the_destroy(provider, resource, location):
    ws = {'name': 'demo', 'status': 'ready', 'activity': 'idle', 'provider': provider, 'resource_id': resource,
          'location': location, 'address': '10.0.0.5', 'repo': 'file:///tmp/repo', 'ref': 'main',
          'lease': {'expires_at': 0}, 'params': {'ssh_user': 'agent', 'ssh_port': 2222, 'agent': 'codex',
                                                 'ssh_private_key': '/keys/id'},
          'facts': {'head': 'abcdef0123456789', 'agent': {'briefs': 2, 'running': True}}}
    lines = summary(ws, 'inventories/x', '/tmp/journal.sqlite', environ={})
    said = dict(line.split(None, 1) for line in lines)
    assert said['workspace'] == 'demo'
    assert said['status'] == 'ready, activity idle'
    assert said['provider'] == '%s %s in %s' % (provider, resource, location)
    assert said['address'] == '10.0.0.5'
    assert said['ssh'] == 'ssh -i /keys/id -p 2222 agent@10.0.0.5'
    assert said['destroy'] == 'ansible-playbook -i inventories/x playbooks/destroy.yml -e workspace=demo'
    assert said['agent'] == 'codex, 2 brief(s), running'
    assert said['repository'] == 'file:///tmp/repo at main (abcdef012345)'
    assert len(lines) <= 12 and not any('{' in line for line in lines)
    # Run by the demo, the destroy names the demo's place and journal: as printed, it finds the workspace.
    lines = summary(ws, 'inventories/x', '/tmp/journal.sqlite',
                    environ={'LOCALPVE_STATE_DIR': '/d/cluster', 'EPHEMERA_JOURNAL': '/d/my journal.sqlite'})
    assert dict(line.split(None, 1) for line in lines)['destroy'] == (
        "LOCALPVE_STATE_DIR=/d/cluster EPHEMERA_JOURNAL='/d/my journal.sqlite' ansible-playbook -i inventories/x "
        'playbooks/destroy.yml -e workspace=demo')


INFO = {'seed': {'vpc_id': 'vpc-1', 'subnet_id': 'subnet-1', 'security_group_id': 'sg-1', 'key_name': 'k',
                 'image_id': 'ami-1', 'image_parameter': '/aws/ami', 'foreign_instances': {'x': 'i-9'}},
        'pid': 1, 'endpoint_url': 'http://e', 'moto_url': 'http://moto', 'region': 'us-east-1',
        'hetzner': {'endpoint': 'http://h', 'location': 'fsn1', 'image': 'debian-12', 'network': 'n'},
        'gcp': {'endpoint': 'http://g', 'project': 'p', 'zone': 'z', 'image': 'i'},
        'azure': {'resource_manager_url': 'https://a', 'subscription_id': 's'},
        'address_range': '127.0.82.10-127.0.82.250', 'public_range': 'r', 'ssh_user': 'root', 'ssh_port': 22,
        'ssh_private_key': '/k', 'guest_root': '/g', 'state_dir': '/s'}
AWS_WORDS = ('aws', 'vpc-', 'ami-', 'moto', 'us-east-1')


@pytest.mark.parametrize('show', ['hetzner', 'gcp', 'azure'])
def test_a_cloud_demo_shows_no_aws_banner(monkeypatch, show):
    monkeypatch.setattr(cloud_cli.process, 'up', lambda options, scope=None: INFO)
    monkeypatch.setattr(cloud_cli, '_options', lambda args: None)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cloud_cli.cmd_up(types.SimpleNamespace(json=False, scope=None, show=show)) == 0
    text = out.getvalue()
    assert '  %s ' % show in text
    assert not [word for word in AWS_WORDS if word in text.lower()], text
    others = [p for p in ('hetzner', 'gcp', 'azure') if p != show]
    assert not [line for line in text.splitlines() if line.split()[:1] in ([p] for p in others)], text
