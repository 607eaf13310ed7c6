# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  gcp_project:
    description:
      - The Google Cloud project. With O(provider=gcp) required, here or in E(GOOGLE_CLOUD_PROJECT)
        (or E(CLOUDSDK_CORE_PROJECT)).
    type: str
  gcp_zone:
    description:
      - The Compute Engine zone (V(europe-west1-b)). If not set, E(EPHEMERA_GCP_ZONE), then E(CLOUDSDK_COMPUTE_ZONE)
        is used. An unknown zone is refused before an instance is requested.
    type: str
  gcp_auth_kind:
    description:
      - How to get credentials. V(application) takes application default credentials (E(GOOGLE_APPLICATION_CREDENTIALS),
        the gcloud login, the metadata server); V(serviceaccount) reads the key file O(gcp_service_account_file);
        V(anonymous) sends none (only for a local fake).
      - Credentials are never recorded in the journal or shown.
    type: str
    choices: [application, serviceaccount, anonymous]
    default: application
  gcp_service_account_file:
    description:
      - Path of a service account's JSON key. If not set, E(GOOGLE_APPLICATION_CREDENTIALS) is used.
    type: path
  gcp_endpoint_url:
    description:
      - The Compute Engine endpoint to talk to instead of Google's own (the try-out cloud of the tests).
      - If not set, E(EPHEMERA_GCP_ENDPOINT_URL) is used.
    type: str
  gcp_retry_timeout:
    description:
      - Seconds for which rate limits (429) and server errors of one call are ridden out with backoff.
    type: int
    default: 60
  gcp_machine_type:
    description:
      - The machine type of new instances, checked before an instance is requested.
    type: str
    default: e2-small
  gcp_network:
    description:
      - The VPC network of new instances, checked before an instance is requested.
    type: str
    default: default
  gcp_service_account_email:
    description:
      - The service account new instances run as; the expiry guard in the instance deletes it with this account.
    type: str
    default: default
  gcp_ssh_public_key:
    description:
      - The public key that goes into the instance's C(ssh-keys) metadata for O(gcp_ssh_user).
    type: str
  gcp_ssh_user:
    description:
      - The user O(gcp_ssh_public_key) is for.
    type: str
    default: root
  gcp_address:
    description:
      - Which address to reach the instance at; V(public) gives it an external address.
    type: str
    choices: [public, private]
    default: public
  gcp_labels:
    description:
      - Labels of your own on new instances. Keys and values follow Compute Engine's rules (lowercase letters, digits,
        C(_) and C(-), at most 63 characters; a key starts with a letter); a label that breaks them is refused before
        an instance is requested.
    type: dict
    default: {}
  gcp_guard:
    description:
      - What a create does when the instance's service account may not delete the instance (its expiry guard could
        not reclaim it). V(refuse) fails the create; V(warn) goes on with a warning.
    type: str
    choices: [refuse, warn]
    default: refuse
  gcp_guard_metadata_url:
    description:
      - The metadata server the guard in the instance asks (C({address}) is replaced by the instance's address).
        If not set, the guard's default, C(http://metadata.google.internal).
    type: str
  gcp_guard_api_url:
    description:
      - The Compute Engine endpoint the guard in the instance calls. If not set, C(https://compute.googleapis.com).
    type: str
  gcp_guard_serial:
    description:
      - Where the guard writes its serial console lines (C({address}) is replaced by the instance's address). If not
        set, C(/dev/ttyS0).
    type: str
'''
