"""The whole fleet through the shipped playbooks: a journal that holds a workspace on EC2 and one on Hetzner Cloud
(both on the try-out cloud). Reconcile from the AWS inventory says the Hetzner one lives elsewhere (not "missing"),
and with fleet=true looks at each through its own provider. The label sweep (cleanup) covers both places and names
the one it cannot reach. One expiry sweep from the AWS inventory then releases what expired on both, and the lease
audit reports each place. Without Hetzner's
credentials the EC2 workspace is released, the Hetzner one is reported as not reached and kept, and the run fails
naming it; with them, the next run releases it too."""

import time

from tests.integration.hetzner.hzrun import HetznerSite
from tests.integration.playbooks import make_repo

from .awsrun import DONE_AGENTS, AwsSite


def test_one_sweep_releases_what_expired_on_every_provider_and_names_the_one_it_cannot_reach(localcloud, tmp_path):
    aws = AwsSite(localcloud, tmp_path)
    hetzner = HetznerSite(localcloud, tmp_path)  # the same journal
    repo = make_repo(str(tmp_path / 'repo'))
    for site, name in ((aws, 'fleet-aws'), (hetzner, 'fleet-hz')):
        run = site.create(name, repo, ttl=600, idle_timeout=30, ephemera_agents=DONE_AGENTS)
        assert run.ok, run.explain()
    info = localcloud.info['hetzner']
    hetzner_env = {'HCLOUD_TOKEN': info['token'], 'HCLOUD_ENDPOINT': info['endpoint']}

    # Reconcile from the AWS inventory: the Hetzner workspace is another provider's, not "missing".
    alone = aws.playbook('reconcile.yml')
    assert alone.ok, alone.explain()
    kinds = {f['workspace']: f['kind'] for f in alone.task('Compare the journal with the cluster')['findings']
             if f['workspace']}
    assert kinds == {'fleet-aws': 'ok', 'fleet-hz': 'other_provider'}, kinds
    # The whole fleet: each workspace looked at through its own provider.
    both = aws.playbook('reconcile.yml', fleet=True, env=hetzner_env)
    assert both.ok, both.explain()
    found = both.task('Compare the journal with the cluster')
    assert sorted((f['workspace'], f['kind'], f['place'].split()[0]) for f in found['findings'] if f['workspace']) \
        == [('fleet-aws', 'ok', 'aws'), ('fleet-hz', 'ok', 'hetzner')], found['report']
    assert 'hetzner' in found['places'] and any(p.startswith('aws ') for p in found['places'])

    # The label sweep over the fleet (a dry run), without Hetzner's token: EC2 is swept, Hetzner Cloud is named.
    cleanup = aws.playbook('cleanup.yml')
    assert not cleanup.ok
    result = cleanup.task('Sweep the pool by labels')
    assert 'could not reach hetzner' in result['msg'] and 'every other place was swept' in result['msg'], result['msg']
    swept = {e['name']: e['place'].split()[0] for e in result['entries'] if e.get('name')}
    assert swept.get('fleet-aws') == 'aws' and 'fleet-hz' not in swept, result['report']
    assert [e['place'] for e in result['entries'] if e['action'] == 'unreachable'] == ['hetzner']
    assert any(p.startswith('aws ') for p in result['places']) and result['counts']['unreachable'] == 1
    assert any(line.startswith('[aws ') for line in result['report']), result['report']
    assert result['report'][-1].startswith('[hetzner] unreachable: hetzner was not swept'), result['report']
    assert len(aws.instances('fleet-aws')) == 1 and len(hetzner.servers('fleet-hz')) == 1

    expiry = max(aws.workspace(name)['lease']['expires_at'] for name in ('fleet-aws', 'fleet-hz'))
    time.sleep(max(0.0, expiry - time.time()) + 0.3)

    # From the AWS inventory, with no Hetzner token anywhere: EC2 is swept, Hetzner Cloud is named and kept.
    first = aws.playbook('expire.yml')
    assert not first.ok
    result = first.task('Release what expired')
    assert 'could not reach hetzner' in result['msg'] and 'every other place was swept' in result['msg'], result['msg']
    by_name = {e['workspace']: e for e in result['entries']}
    assert by_name['fleet-aws']['action'] == 'released' and by_name['fleet-aws']['place'].startswith('aws ')
    assert [e['place'] for e in result['entries'] if e['action'] == 'unreachable'] == ['hetzner']
    assert aws.workspace('fleet-aws')['status'] == 'destroyed' and aws.instances('fleet-aws') == []
    assert aws.workspace('fleet-hz')['status'] == 'ready' and len(hetzner.servers('fleet-hz')) == 1

    # The lease audit, place by place: the EC2 workspace's cleanup complete, the Hetzner one expired and waiting.
    audit = aws.playbook('lease_audit.yml', audit_all=True)
    assert audit.ok, audit.explain()
    result = audit.task('Audit the leases and cleanups in the journal')
    places = {place.split()[0]: counted for place, counted in result['places'].items()}
    assert places == {'aws': {'complete': 1}, 'hetzner': {'expired': 1}}, result['report']
    assert any(line.startswith('hetzner: 1 expired') for line in result['report']), result['report']

    # The Hetzner Cloud token and endpoint in the environment, as a site gives them: the next sweep finishes.
    second = aws.playbook('expire.yml', env=hetzner_env)
    assert second.ok, second.explain()
    result = second.task('Release what expired')
    assert [(e['workspace'], e['action'], e['place']) for e in result['entries'] if e['workspace'] == 'fleet-hz'] \
        == [('fleet-hz', 'released', 'hetzner')], result['report']
    assert set(result['places']) >= {'hetzner'} and aws.workspace('fleet-hz')['status'] == 'destroyed'
    assert hetzner.servers('fleet-hz') == []

    # fleet=false: the AWS sweep alone, as before.
    alone = aws.playbook('expire.yml', fleet=False)
    assert alone.ok and 'places' not in alone.task('Release what expired'), alone.explain()
