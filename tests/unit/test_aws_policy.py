"""The IAM policy of docs/quickstart-aws.md names exactly the AWS API actions the collection calls, no more, no
fewer; it is the only copy."""

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


PAGE = os.path.join('docs', 'quickstart-aws.md')


def page_policy():
    """The policy the page writes to ephemera-policy.json (the document of its put-user-policy)."""
    with open(os.path.join(ROOT, PAGE)) as src:
        text = src.read()
    block = re.search(r"cat > ephemera-policy\.json <<'EOF'\n(.*?)\nEOF\n", text, re.S).group(1)
    assert '--policy-document file://ephemera-policy.json' in text
    return json.loads(block)


def policy_actions(policy):
    actions = set()
    for statement in policy['Statement']:
        listed = statement['Action']
        actions.update([listed] if isinstance(listed, str) else listed)
    return actions


def test_the_quickstart_policy_names_exactly_the_actions_the_provider_calls():
    called = called_actions()
    # The reader sees each call site: a call the pattern misses would make this test pass wrongly.
    assert {'ec2:RunInstances', 'ec2:TerminateInstances', 'ec2:DescribeInstances', 'ssm:GetParameter'} <= called
    assert policy_actions(page_policy()) == called


def test_every_statement_allows_and_nothing_is_a_wildcard_action():
    for statement in page_policy()['Statement']:
        assert statement['Effect'] == 'Allow'
        listed = statement['Action']
        assert all('*' not in a for a in ([listed] if isinstance(listed, str) else listed))


def test_no_other_document_holds_a_copy_of_the_policy():
    """One policy: the README and the other pages point at the quick start instead of repeating it."""
    copies = []
    for folder in ('.', 'docs'):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            path = os.path.normpath(os.path.join(folder, name))
            if name.endswith(('.md', '.rst')) and path != PAGE:
                with open(os.path.join(ROOT, path)) as src:
                    if re.search(r'"Action":\s*\[?\s*"ec2:', src.read()):
                        copies.append(path)
    assert copies == []
