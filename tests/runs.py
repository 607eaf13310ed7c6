"""Processes that stand for ansible-playbook runs on simulated controller hosts, for the tests of claims and leases.

    started = Processes()
    proc = started.start()                            # a process that sleeps: alive until killed
    queue = run_on(journal, 'controller-a', proc, lease=1.5)
    started.kill_all()                                # kills (by pid) and reaps every process it started
"""

import subprocess
import sys

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner, proc_start_time


class Processes:
    def __init__(self):
        self.started = []

    def start(self):
        proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
        self.started.append(proc)
        return proc

    def kill_all(self):
        for proc in self.started:
            proc.kill()
            proc.wait()


def run_on(journal, host, proc, lease):
    """The queue as seen by the run ``proc`` on controller ``host``."""
    return Queue(journal, owner=Owner(host, proc.pid, proc_start_time(proc.pid)), lease=lease)


def claim(queue, kind='create', target='ws1'):
    """``queue``'s run asks for ``kind`` on ``target`` and gets it at once: its Turn."""
    turn = queue.poll(queue.enqueue(kind, target).request_id)
    assert turn.outcome == CLAIMED
    return turn


def held_and_awaited(journal, processes, lease, target='ws1'):
    """Controller A's run holds the create of ``target``; controller B's run has asked for it too:
    (A's queue, A's turn, B's queue, B's request id)."""
    a_proc, b_proc = processes(), processes()
    a = run_on(journal, 'controller-a', a_proc, lease=lease)
    first = claim(a, target=target)
    b = run_on(journal, 'controller-b', b_proc, lease=lease)
    return a, first, b, b.enqueue('create', target).request_id
