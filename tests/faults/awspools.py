"""The AWS warm pools' rows of the crash-safety matrix, on a try-out cloud of their own (docs/internals/faults.md,
docs/pools.md).

The same rows as the Proxmox pools' (tests/faults/pools.py): a clean fill (the shipped pool_fill playbook) and a
clean claim (a create through the shipped create playbook that takes a warm member) traced first, then kills of the
fill at a point of its member (``<pool>-*``) and of the claim at a point of the create's candidate step, each
followed by the same playbook again (at most twice; the full size's reconcile variant runs reconcile first), and the
lost answers of the fill's launch and of the claim's re-tagging. A member is an instance; the claim gives it to the
workspace with one CreateTags on the instance and its volumes (the marker signed for the workspace, Name,
``ephemera:workspace``, the lease's tags: the provider's write_remark).

The invariants are the Proxmox pools' over the cloud as tests/faults/cloud.py reads it (an instance is ours when
its marker verifies for this controller, bound to its client token and id): every member in exactly one state
(warm: its record live, its instance its alone, running, its guest reachable with its pinned key and its runner
answering; claimed by the one workspace that holds its instance, its own record closed), no instance given to two
workspaces, none of ours unaccounted for, no foreign instance touched (the cloud's seed, and one that copies the
warm member's tags, marker included), no queue entry left running.
"""

from tests.faults import aws, pools
from tests.faults.aws import AwsSite
from tests.faults.cloud import run_part
from tests.faults.cloudpools import CloudPoolMatrix, claim_points, fill_points

# ci: the decisive points. The fill's: its place in the pool taken (core/pools.py take_slot), its workspace record
# made, RunInstances's answer (EC2 launched, the journal does not know), the member recorded warm with its queue
# entry not finished. The claim's, the Proxmox claim's with CreateTags for its re-signing: the member's
# compare-and-set to claimed, the workspace's record of the claim (the nonce of its new marker), CreateTags's answer
# (the instance carries the workspace's marker and tags, the journal does not know), the instance taken over by the
# workspace's record with the member's record not yet closed.
CI_FILL = fill_points(['aws RunInstances'])
CI_CLAIM = claim_points('aws', 'CreateTags')
# (row label, operation, EC2 call, None): the answer of the call is lost once.
LOST = (
    ('fill launch', 'fill', 'RunInstances', None),
    ('claim re-tagging', 'claim', 'CreateTags', None),
    ('fill re-signing', 'fill', 'CreateTags', None),
)
SIZES = pools.sizes(LOST)


class AwsPoolMatrix(CloudPoolMatrix):
    """The pools' rows on the try-out cloud's EC2."""

    prefix = 'aws-pools'
    ci_fill = CI_FILL
    ci_claim = CI_CLAIM
    sizes = SIZES

    def place(self):
        info = self.site.info
        return info['region'], info['seed']['image_id']

    def lose(self, method, path):
        return self.site.cloud.drop_response(method)

    def pool_problems(self, view, pool, workspaces, size):
        return super().pool_problems(view, pool, workspaces, size) + self.volume_problems(view, pool, workspaces)

    def volume_problems(self, view, pool, workspaces):
        """The volumes of the row's instances (its pool's members' and its workspaces') carry their instance's marker
        and workspace tags: the launch tags both, and the configure step's re-signing and a claim re-tag both with
        one CreateTags."""
        own = set(i for i, owner in view.ours.items() if owner in workspaces or owner.startswith(pool['name'] + '-'))
        if not own:
            return []
        out = []
        for volume in self.site.cloud.ec2(direct=True).describe_volumes()['Volumes']:
            for instance in [a['InstanceId'] for a in volume.get('Attachments') or [] if a['InstanceId'] in own]:
                tags = dict((t['Key'], t['Value']) for t in volume.get('Tags') or [])
                wanted = view.instances[instance]['tags']
                out += ['volume %s of %s has %s %s, its instance %s'
                        % (volume['VolumeId'], instance, key, tags.get(key), wanted.get(key))
                        for key in (aws.TAG_MARKER, aws.TAG_WORKSPACE) if tags.get(key) != wanted.get(key)]
        return out


def run_aws_pools_part(size, keep, log=print):
    """The AWS pools' rows on a try-out cloud of their own: (cells, uncovered)."""
    return run_part(AwsSite, AwsPoolMatrix, size, keep, log=log, label='aws-pools')
