# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole fleet: the places (provider, and location where a provider's connection serves one) that a journal
holds workspaces in, and a sweep run over each of them through a connection of its own.

A sweep of one place leaves the workspaces of every other place alone (:func:`lives_here`); a run over the fleet
(:class:`FleetRun`) sweeps each place in turn, reports a place it cannot reach and goes on with the others.
"""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base, registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import placing


def place_of_provider(provider):
    """The place label of a bound Provider: its name, and its location where its connection serves one."""
    return placing.place_label(provider.name, provider.here if provider.location_option else None)


def lives_here(provider, ws):
    """True when the workspace lives on ``provider`` (a bound Provider), and, for a provider whose connection serves
    one location, in that location."""
    if placing.provider_of(ws) != provider.name:
        return False
    return not provider.location_option or not ws.get('location') or ws['location'] == provider.here


def places(journal, params):
    """The places a run over the whole fleet covers, as (provider, location or None): the run's own provider (None:
    the location it is configured for), and every provider the journal holds a workspace on that is not destroyed
    (for a provider whose connection serves one location, each such location). The run's own comes first; without a
    journal (None: a lost one, for the label sweep) the run's own is the only place."""
    own = registry.provider_of(params)
    found = {(own, None)}
    for ws in journal.list_workspaces() if journal is not None else ():
        if ws['status'] == 'destroyed':
            continue
        name = placing.provider_of(ws)
        found.add((name, ws.get('location') if base.location_option(name) else None))
    return sorted(found, key=lambda place: (place != (own, None), place[0], place[1] or ''))


class FleetRun:
    """A sweep over every place of :func:`places`, one after another, each through a connection of its own
    (``connect(params)``: what a module acts through). A place that cannot be reached (credentials missing or
    refused, its SDK not installed) is reported (``unreachable``), and the others are still swept. Subclasses give
    :meth:`sweep`, which returns (changed, entries) of one place; ``kind_key`` names what an entry is."""

    kind_key = 'action'

    def __init__(self, journal, params, secret, connect, check_mode=False, clock=time.time):
        self.journal = journal
        self.params = params
        self.secret = secret
        self.connect = connect
        self.check_mode = check_mode
        self.clock = clock
        self.changed = False
        self.unreachable = []
        self.by_place = {}

    def sweep(self, provider, params):
        raise NotImplementedError

    def run(self):
        """Every place's entries, each with its ``place``; an entry ``unreachable`` for a place not reached."""
        entries, covered = [], set()
        for name, location in places(self.journal, self.params):
            if (name, location) in covered:
                continue
            label = placing.place_label(name, location)
            params = dict(self.params, provider=name)
            option = base.location_option(name)
            if option and location:
                params[option] = location
            try:
                provider = registry.bind(self.connect(params), self.secret)
                if option and location is None:
                    # The run's own connection: its location (from an option or the environment) is swept now.
                    location = provider.here
                    label = placing.place_label(name, location)
                    covered.add((name, location))
                changed, found = self.sweep(provider, params)
            except EphemeraError as err:
                self.unreachable.append('%s (%s)' % (label, err))
                entries.append({'workspace': None, self.kind_key: 'unreachable', 'place': label,
                                'detail': '%s was not swept: %s' % (label, err)})
                continue
            self.changed = self.changed or changed
            for entry in found:
                entry['place'] = label
            self.by_place[label] = placing.counts_of(found, self.kind_key)
            entries.extend(found)
        return entries

    def place_lines(self, empty='nothing found'):
        """One report line per place swept: what was done there, by ``kind_key`` (``empty`` when nothing)."""
        return placing.place_lines(self.by_place, empty)

    def unreachable_message(self, what):
        """The failure of a run that could not reach every place."""
        return ('The %s could not reach %s; every other place was swept. Give the credentials of each provider the '
                'journal holds workspaces on (their environment variables, or the ephemera_<option> variables), then '
                'run it again.' % (what, '; '.join(self.unreachable)))
