"""The AWS fork's rows of the crash-safety matrix, on a try-out cloud of their own (docs/internals/faults.md,
docs/fork.md).

The same rows as the Proxmox fork's (tests/faults/fork.py): a ready parent made once, every row a fork of it into
two children of fresh names through the shipped fork playbook, then the same fork again until it converged. The copy
is an image (CreateImage without reboot) and its EBS snapshots; the children are launches from it. The kills (full):
after the image's name is journaled, after CreateImage's answer, between the children's launches, at the commit point
of the adoption, between the image's deregistration and its snapshots' deletion; ci: the three where EC2 acted. The
lost answers (full): CreateImage, DeregisterImage and DeleteSnapshot (the cloud acts, the answer is cut); ci:
CreateImage. After every run: no child adopted unless
every child reached identity reset; after the last: every child ready, the parent as it was (its instance, its host
key) with its fork done, no fork image and no snapshot of one left, no leak, no foreign instance touched.
"""

from tests.faults import cloud
from tests.faults.aws import AwsSite
from tests.faults.cloud import run_part
from tests.faults.fork import ForkMatrix

FORK_TAG = 'ephemera:fork-image'
# The decisive points of the AWS fork (the full size's kills; the other points are the flows' own code, which the
# Proxmox fork rows and the AWS create and destroy rows kill at). ci: those where EC2 acted and the journal does not
# know yet (the journal's commits of the fork are the same code as on Proxmox VE, whose ci rows kill there).
KILLS = (
    ('parent', 'fork.begin journal fork_started', 1),
    ('parent', 'fork.snapshot aws CreateImage', 1),
    ('child1', 'create.clone aws RunInstances', 1),
    ('parent', 'fork.adopt journal fork_adopted', 1),
    ('parent', 'fork.finish aws DeregisterImage', 1),
)
CI_KILLS = tuple(k for k in KILLS if ' aws ' in k[1])
# (row label, EC2 call, None): the answer of the call is lost once.
LOST = (
    ('CreateImage', 'CreateImage', None),
    ('DeregisterImage', 'DeregisterImage', None),
    ('DeleteSnapshot', 'DeleteSnapshot', None),
)
SIZES = {'ci': {'kills': 'ci', 'lost': LOST[:1], 'points': CI_KILLS},
         'full': {'kills': 'ci', 'lost': LOST, 'points': KILLS}}


class AwsForkMatrix(ForkMatrix):
    sizes = SIZES

    @property
    def ci_kills(self):
        return self.size['points']

    prefix = 'aws '
    copies = 'fork images and their snapshots'

    def prepare(self):
        self.site.clear_faults()
        self.site.log_requests()
        super().prepare()

    def view(self):
        return cloud.CloudView(self.site, self.secret)

    def leaks(self, view, records):
        return ['%s %s' % (i, why) for i, why in sorted(cloud.leaks(self.site.adapter, view, records).items())]

    def foreign(self, view):
        return cloud.check_foreign(self.site.adapter, self.foreign_before, view, self.site.requests())

    def check_ready(self, view, ws):
        return cloud.check_ready(self.site.adapter, view, ws)

    def copies_left(self, parent):
        ec2 = self.site.cloud.ec2(direct=True)
        images = ec2.describe_images(Owners=['self'], Filters=[{'Name': 'name', 'Values': ['ephemera-fork-*']}])
        snapshots = ec2.describe_snapshots(OwnerIds=['self'], Filters=[{'Name': 'tag-key', 'Values': [FORK_TAG]}])
        return [i['ImageId'] for i in images['Images']] + [s['SnapshotId'] for s in snapshots['Snapshots']]

    def lose(self, method, path):
        return self.site.cloud.drop_response(method)

    def lost_hits(self, rule):
        return [r['hits'] for r in self.site.cloud.proxy_rules() if r['id'] == rule['id']]


def run_aws_fork_part(size, keep, log=print):
    """The AWS fork rows on a try-out cloud of their own: (cells, uncovered)."""
    return run_part(AwsSite, AwsForkMatrix, size, keep, log=log, label='aws-fork')
