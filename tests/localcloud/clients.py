"""Clients of a running cloud, from its cloud.json (a dict): boto3 EC2 clients and the environment for our side.

boto3 is imported when a client is made, so the command line and the fixtures do not load it otherwise.
"""


def aws_env(info):
    """The environment our side (the collection, ansible-playbook) is given: credentials, region, endpoint."""
    return {'AWS_ACCESS_KEY_ID': info['access_key_id'], 'AWS_SECRET_ACCESS_KEY': info['secret_access_key'],
            'AWS_REGION': info['region'], 'AWS_DEFAULT_REGION': info['region'],
            'AWS_ENDPOINT_URL': info['endpoint_url'], 'EPHEMERA_AWS_ENDPOINT_URL': info['endpoint_url']}


def _client(service, info, key, secret, endpoint=None, region=None, retries=None):
    import boto3  # pylint: disable=import-outside-toplevel
    from botocore.config import Config  # pylint: disable=import-outside-toplevel
    config = Config(retries=retries or {'mode': 'standard', 'max_attempts': 3}, connect_timeout=5, read_timeout=30)
    return boto3.client(service, region_name=region or info['region'], endpoint_url=endpoint or info['endpoint_url'],
                        aws_access_key_id=key, aws_secret_access_key=secret, config=config)


def ec2_client(info, service='ec2', direct=False, region=None, retries=None):
    """A client with our credentials, through the fault proxy (direct=True: straight to moto, no faults, no
    rewriting: moto's own addresses and states)."""
    return _client(service, info, info['access_key_id'], info['secret_access_key'],
                   endpoint=info['moto_url'] if direct else None, region=region, retries=retries)


def foreign_client(info, service='ec2', region=None):
    """A client with the foreign principal's credentials (same account, same endpoint)."""
    foreign = info['foreign']
    return _client(service, info, foreign['access_key_id'], foreign['secret_access_key'], region=region)
