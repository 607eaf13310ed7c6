"""The IAM policy in the README names exactly the AWS API actions the collection calls, no more, no fewer."""

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWS = os.path.join(ROOT, 'plugins', 'module_utils', 'providers', 'aws')
# Every way the provider reaches boto3: Ec2.call('operation', ...), _act(action, 'operation', ...), the paginated
# describe_instances helper, and the SSM client's get_parameter.
CALLS = re.compile(r"""(?:\.call\(\s*|_act\(\s*'[a-z]+',\s*)'([a-z_]+)'|\b(describe_instances|get_parameter)\(""")
SERVICE = {'get_parameter': 'ssm'}


def called_actions():
    found = set()
    for name in os.listdir(AWS):
        if name.endswith('.py'):
            with open(os.path.join(AWS, name)) as src:
                for match in CALLS.finditer(src.read()):
                    operation = match.group(1) or match.group(2)
                    action = ''.join(part.capitalize() for part in operation.split('_'))
                    found.add('%s:%s' % (SERVICE.get(operation, 'ec2'), action))
    return found


def readme_policy():
    with open(os.path.join(ROOT, 'README.md')) as src:
        text = src.read()
    section = text[text.index('## On AWS'):]
    block = re.search(r'```json\n(.*?)\n```', section, re.S).group(1)
    return json.loads(block)


def policy_actions(policy):
    actions = set()
    for statement in policy['Statement']:
        listed = statement['Action']
        actions.update([listed] if isinstance(listed, str) else listed)
    return actions


def test_the_readme_policy_names_exactly_the_actions_the_provider_calls():
    called = called_actions()
    # The reader sees each call site: a call the pattern misses would make this test pass wrongly.
    assert {'ec2:RunInstances', 'ec2:TerminateInstances', 'ec2:DescribeInstances', 'ssm:GetParameter'} <= called
    assert policy_actions(readme_policy()) == called


def test_every_statement_allows_and_nothing_is_a_wildcard_action():
    for statement in readme_policy()['Statement']:
        assert statement['Effect'] == 'Allow'
        listed = statement['Action']
        assert all('*' not in a for a in ([listed] if isinstance(listed, str) else listed))
