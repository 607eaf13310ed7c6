# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The places of the fleet, named and counted: a provider and, where its connections are bound to one (an EC2
client serves one region: base.location_option), its location. Pure, and with no provider's code: the lease audit,
which reads only the journal, names places with it."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base


def provider_of(ws):
    """The provider a workspace record lives on (a record without one is Proxmox VE's)."""
    return base.provider_of(ws)


def place_label(name, location):
    """A provider and, where its connections are bound to one, its location: "aws eu-west-1", "proxmox"."""
    return '%s %s' % (name, location) if location and base.location_option(name) else name


def place_of(ws):
    """The place label of a workspace record."""
    return place_label(provider_of(ws), ws.get('location'))


def counts_of(entries, key='action'):
    """The entries by ``key``."""
    counts = {}
    for entry in entries:
        counts[entry[key]] = counts.get(entry[key], 0) + 1
    return counts


def by_place(entries, key='action'):
    """The entries (each naming its ``place``) counted by ``key``, place by place."""
    return {place: counts_of([e for e in entries if e['place'] == place], key)
            for place in {e['place'] for e in entries}}


def place_lines(counted_by_place, empty='nothing found'):
    """One report line per place, sorted: ``PLACE: N kind, N kind`` (``empty`` when nothing was counted there)."""
    return ['%s: %s' % (place, ', '.join('%d %s' % (n, kind) for kind, n in sorted(counted.items())) or empty)
            for place, counted in sorted(counted_by_place.items())]
