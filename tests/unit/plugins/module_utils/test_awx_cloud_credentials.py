"""What AWX's own cloud credentials inject reaches the collection's options: the Google Compute Engine credential's
key file (GCE_CREDENTIALS_FILE_PATH, the file AWX writes: type, private_key, client_email, project_id, token_uri)
and project (GCE_PROJECT), the Azure Resource Manager credential's AZURE_TENANT and AZURE_SECRET, and the Amazon Web
Services credential's AWS_SECURITY_TOKEN, which botocore reads. The variables are AWX's (awx's credential
injectors); the options are validated by Ansible's own argument spec validator."""

import json

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.options import azure_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.client import credentials
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.options import gcp_argument_spec


def validated(spec, monkeypatch, env):
    for name in ('GOOGLE_APPLICATION_CREDENTIALS', 'GOOGLE_CLOUD_PROJECT', 'CLOUDSDK_CORE_PROJECT', 'AZURE_TENANT_ID',
                 'AZURE_CLIENT_SECRET'):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = ArgumentSpecValidator(spec).validate({})
    assert not result.error_messages, result.error_messages
    return result.validated_parameters


def awx_key_file(tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / 'awx-gce.json'
    path.write_text(json.dumps({'type': 'service_account', 'private_key': pem,
                                'client_email': 'ephemera@proj-1.iam.gserviceaccount.com', 'project_id': 'proj-1',
                                'token_uri': 'https://oauth2.googleapis.com/token'}, indent=2))
    return str(path)


def test_awxs_compute_engine_credential_gives_the_key_file_and_project(tmp_path, monkeypatch):
    path = awx_key_file(tmp_path)
    env = {'GCE_CREDENTIALS_FILE_PATH': path, 'GCP_SERVICE_ACCOUNT_FILE': path, 'GCE_PROJECT': 'proj-1'}
    params = validated(gcp_argument_spec(), monkeypatch, env)
    assert (params['gcp_service_account_file'], params['gcp_project'], params['gcp_auth_kind']) == (
        path, 'proj-1', 'application')
    # The default auth kind uses the file that was given, not whatever application default credentials find.
    creds = credentials(params['gcp_auth_kind'], params['gcp_service_account_file'], environ={})
    assert creds.service_account_email == 'ephemera@proj-1.iam.gserviceaccount.com'
    with pytest.raises(base.InvalidRequest) as missing:
        credentials('application', str(tmp_path / 'gone.json'), environ={})
    assert 'does not exist' in str(missing.value)


def test_awxs_azure_credential_gives_the_tenant_and_the_secret(monkeypatch):
    env = {'AZURE_SUBSCRIPTION_ID': 'sub', 'AZURE_CLIENT_ID': 'app', 'AZURE_TENANT': 'tenant', 'AZURE_SECRET': 's3cret'}
    params = validated(azure_argument_spec(), monkeypatch, env)
    assert (params['azure_subscription_id'], params['azure_client_id'], params['azure_tenant_id'],
            params['azure_client_secret']) == ('sub', 'app', 'tenant', 's3cret')
    # The Azure SDK's own names win when both are set.
    params = validated(azure_argument_spec(), monkeypatch, {'AZURE_TENANT_ID': 'mine', 'AZURE_CLIENT_SECRET': 'own'})
    assert (params['azure_tenant_id'], params['azure_client_secret']) == ('mine', 'own')


def test_awxs_aws_credential_session_token_is_read_by_botocore(monkeypatch):
    import botocore.session
    for name in ('AWS_PROFILE', 'AWS_SESSION_TOKEN', 'AWS_SHARED_CREDENTIALS_FILE', 'AWS_CONFIG_FILE'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'AKIAEXAMPLE')
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'secret')
    monkeypatch.setenv('AWS_SECURITY_TOKEN', 'token-from-awx')
    creds = botocore.session.get_session().get_credentials().get_frozen_credentials()
    assert (creds.access_key, creds.token) == ('AKIAEXAMPLE', 'token-from-awx')
