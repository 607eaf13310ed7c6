"""The ansible-core releases the collection claims are the ones its tests run on: make test on the release
requirements-test.txt pins, make test-cores on every older minor release down to the lower bound of meta/runtime.yml's
requires_ansible (CI runs a part of it, CORE_SET=ci, on that lower bound)."""

import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(name):
    with open(os.path.join(ROOT, name), encoding='utf-8') as f:
        return f.read()


def claimed_lower_bound():
    found = re.match(r'^>=\s*(\d+)\.(\d+)', yaml.safe_load(read('meta/runtime.yml'))['requires_ansible'])
    assert found, 'requires_ansible has no lower bound'
    return int(found.group(1)), int(found.group(2))


def pinned():
    found = re.search(r'^ansible-core==(\d+)\.(\d+)\.\d+$', read('requirements-test.txt'), re.M)
    assert found, 'requirements-test.txt pins no ansible-core'
    return int(found.group(1)), int(found.group(2))


def make_cores():
    found = re.search(r'^CORES \?= (.+)$', read('Makefile'), re.M)
    assert found, 'the Makefile sets no CORES'
    return found.group(1).split()


def test_test_cores_runs_every_minor_release_from_the_claimed_oldest_to_the_pinned():
    (major, oldest), (pinned_major, newest) = claimed_lower_bound(), pinned()
    assert major == pinned_major
    assert make_cores() == ['%d.%d' % (major, minor) for minor in range(oldest, newest)]


def test_ci_runs_the_tests_and_then_the_oldest_claimed_core():
    commands = [line for line in read('.ci/run').splitlines() if line and not line.startswith(('#', 'set ', 'cd '))]
    major, oldest = claimed_lower_bound()
    assert commands == ['make test', 'make test-long', 'make test-cores CORES=%d.%d CORE_SET=ci' % (major, oldest)]


def make_list(name):
    found = re.search(r'^%s := ((?:.*\\\n)*.*)$' % name, read('Makefile'), re.M)
    assert found, 'the Makefile sets no %s' % name
    return found.group(1).replace('\\\n', ' ').split()


def test_the_ci_set_of_the_core_tests_is_a_part_of_them_and_each_of_its_paths_exists():
    every, ci = make_list('CORE_TESTS'), make_list('CORE_TESTS_CI')
    assert ci and set(ci) < set(every)
    for path in every:
        assert os.path.exists(os.path.join(ROOT, path)), path
