"""The demo's virtualenv installs only what the demo runs, pinned as the tests pin it: ansible-core and the try-out
cluster's fakepve from requirements-test.txt's pins, the collection's runtime requirements, and for a try-out cloud
moto with the provider's SDK; never the ansible package, ansible-lint or Molecule."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def lines(name):
    with open(os.path.join(ROOT, name)) as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith('#')]


def pins(name):
    return dict(re.split(r'==', line, 1) for line in lines(name) if '==' in line)


def test_the_demo_installs_what_it_runs_pinned_as_the_tests_pin_it():
    demo = lines('requirements-demo.txt') + lines('requirements-demo-cloud.txt')
    tested = pins('requirements-test.txt')
    assert '-r requirements.txt' in demo
    for name, version in pins('requirements-demo.txt').items():
        assert tested[name] == version, name
    for name, version in pins('requirements-demo-cloud.txt').items():
        assert tested[name] == version, name
    names = set(re.split(r'[=<>\[ ]', line, 1)[0] for line in demo if not line.startswith('-r'))
    assert names == {'ansible-core', 'fakepve', 'moto'}, names


def test_make_demo_uses_the_demo_virtualenv():
    with open(os.path.join(ROOT, 'Makefile')) as handle:
        makefile = handle.read()
    rule = makefile[makefile.index('\ndemo: '):].split('\n\n', 1)[0]
    assert '$(DEMO_STAMP)' in rule and 'EPHEMERA_DEMO_VENV=$(DEMO_VENV)' in rule and '$(BIN)' not in rule
