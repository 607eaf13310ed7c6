# The command surface of ephemera.workspaces. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# ephemera.workspaces resolves to this checkout only: a copy of the collection in ~/.ansible/collections (a
# release installed with ansible-galaxy, or one Molecule put there) never shadows it. The path is a directory
# holding nothing but a link to this checkout (tests/ansible_run.py, which every test and benchmark run uses too);
# the other collections still come from the venv.
PIN_COLLECTION = ANSIBLE_COLLECTIONS_PATH="$$($(BIN)/python -m tests.ansible_run collections-path)" \
	ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=1

.PHONY: help venv system-packages test test-long unit static sanity lint integration integration-long test-clouds
.PHONY: test-cores demo collection
.PHONY: bench-journal bench-journal-tasks bench-queue bench-create bench-reconcile bench-step bench-expire bench-poll
.PHONY: bench-inventory bench-template bench-agent bench-fork bench-warm faults faults-clouds soak soak-fleet
.PHONY: cluster-up cluster-status cluster-down bench-cluster
.PHONY: molecule
.PHONY: cloud-up cloud-status cloud-down

help:
	@echo "make demo          run the main job on the local try-out cluster"
	@echo "make demo AGENT=codex    the same with codex (or opencode; claude-code is the default)"
	@echo "make demo PROVIDER=aws   the same on the local try-out cloud for AWS"
	@echo "make demo PROVIDER=hetzner the same on the try-out cloud's Hetzner Cloud fake"
	@echo "make demo PROVIDER=azure the same on the try-out cloud's ARM fake for Azure"
	@echo "make demo PROVIDER=gcp   the same on the try-out cloud's Compute Engine fake"
	@echo "make test          install everything needed and run every test but the long runs (~30 minutes)"
	@echo "make test-long     the long runs: template builds, pools, cloud leases, every cloud's matrix rows, Molecule"
	@echo "make venv          create $(VENV) with runtime and test dependencies"
	@echo "make collection    build the collection tarball into build/ from the files git tracks only"
	@echo "make unit | sanity | lint | integration    one part of 'make test' (integration-long: of test-long)"
	@echo "make test-clouds   the cloud providers' integration tests alone (make test, test-long run them too)"
	@echo "make test-cores    the playbook paths on the older ansible-core releases the collection supports (CORES=..., CORE_SET=ci: the part CI runs)"
	@echo "make molecule      the Molecule scenarios of the create, destroy and archive roles (in make test-long)"
	@echo "make faults        the crash-safety matrix (FAULTS_SIZE=full, the default, or ci as in make test)"
	@echo "make faults-clouds its Hetzner, Compute Engine, Azure rows and every cloud's warm pool rows (FAULTS_SIZE=full or ci)"
	@echo "make soak          500 seeded random fault schedules (SCHEDULES=N, FIRST_SEED=N, SOAK_JOBS=N)"
	@echo "make soak-fleet    the same on every provider, journal in SQLite and in PostgreSQL (same variables; SEEDS=N,M)"
	@echo "make bench-journal  8 processes x 200 fenced transitions: SQLite and PostgreSQL journals, tx/s"
	@echo "make bench-journal-tasks  what a task pays to open the journal: SQLite against PostgreSQL, as AWX runs it"
	@echo "make bench-expire  expiry sweeps over 1,000 live workspaces with real guests, 50 expired a sweep:"
	@echo "                   times and API requests at parallel 8 and 32 (PROVIDER=aws: on the AWS try-out cloud)"
	@echo "make bench-template  a template build by step, and create-to-ready on debian vs default guests"
	@echo "make bench-agent   the real agent CLIs: create to ready, first edit, idle, and the agents' share"
	@echo "make bench-fork    one ready workspace forked into 4 children against 4 cold creates"
	@echo "make bench-warm    a create from a warm pool against a cold one and community.proxmox clone+start;"
	@echo "                   the same on AWS against amazon.aws.ec2_instance (WARM_ARGS=\"--provider aws\": that alone)"
	@echo "make bench-poll    a create at Ansible's internal_poll_interval (1 ms) against 10 ms, as the tests run it"

system-packages:
	@scripts/system-packages.sh

# The tarball from a clean list: the files git tracks (docs/install.md); no state a checkout holds reaches it.
collection: venv
	ANSIBLE_GALAXY=$(BIN)/ansible-galaxy scripts/build-collection.sh build

venv: $(STAMP)

$(STAMP): requirements.txt requirements-aws.txt requirements-hetzner.txt requirements-gcp.txt requirements-azure.txt \
		requirements-postgresql.txt requirements-test.txt scripts/link-collection.sh
	@scripts/system-packages.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	scripts/link-collection.sh $(VENV)
	touch $@

# The integration tests (TEST_JOBS pytest workers) and the CI-size fault matrix run side by side, after the unit
# tests and the static checks: much of both is waiting (tasks, SSH, the try-out cluster), so together they take
# little longer than the integration tests alone. Each one's output is printed whole when it ends. (Starting the
# integration tests beside the unit tests was tried: the unit tests then took six times as long, and one of their
# waits, written for an idle machine, failed.)
# The long runs (test-long) are apart: with them make test would take far more than its 30 minutes on two cores.
test: venv
	$(MAKE) --no-print-directory -j2 --output-sync=target unit static
	$(MAKE) --no-print-directory -j2 --output-sync=target integration faults FAULTS_SIZE=ci FAULTS_PART=test

# The long end-to-end runs that make test leaves out (the integration tests marked long: tests/integration/conftest.py
# names them and says why) beside the matrix's rows of the template build and of every cloud at the ci size. CI runs
# it after make test (.ci/run).
test-long: venv
	$(MAKE) --no-print-directory -j2 --output-sync=target integration-long faults FAULTS_SIZE=ci FAULTS_PART=long

# sanity, then ansible-lint: beside the unit tests, which mostly wait on the servers they start.
static: venv
	$(MAKE) --no-print-directory sanity lint

# Four workers, each taking whole files: most of the unit tests' time is waiting on the servers they start
# (PostgreSQL, moto, ansible-galaxy and ansible-builder runs), not on the CPU.
unit: venv
	$(BIN)/python -m pytest -n 4 --dist loadfile tests/unit

sanity: venv
	scripts/sanity.sh $(VENV)

# The venv's bin goes first on PATH so that ansible-lint's ansible-playbook is the venv's one.
lint: venv
	PATH="$(abspath $(BIN)):$$PATH" $(PIN_COLLECTION) $(BIN)/ansible-lint

# TEST_JOBS pytest workers, each taking whole test files (a file's tests share their try-out cluster or cloud).
# Three: most of a test's time is waiting on the try-out places, SSH and the guests, not on the two cores.
TEST_JOBS ?= 3
# `time` (bash's) prints the wall and CPU time of the part, its children included; --durations names the slowest.
integration: venv
	time $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile --durations=25 -m 'not long' tests/integration

integration-long: venv
	time $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile --durations=25 -m long tests/integration

# The integration tests of every shipped playbook (and the inventory and lookup plugins) on each ansible-core release
# meta/runtime.yml claims other than the one requirements-test.txt pins (on which make test runs them all): each in a
# venv of its own under build/ (scripts/core-venv.sh), which runs the playbooks and the modules; the other
# collections (the JSON callback) still come from $(VENV). CI runs it after make test on the oldest (.ci/run).
# tests/unit/test_supported_cores.py checks that CORES is every minor release from the oldest claimed to the pinned.
CORES ?= 2.17 2.18
CORE_TESTS := tests/integration/create/test_happy.py tests/integration/create/test_lease.py \
	tests/integration/create/test_expire.py tests/integration/create/test_cleanup_sweep.py \
	tests/integration/create/test_rerun_and_report.py tests/integration/destroy tests/integration/archive \
	tests/integration/inventory tests/integration/plugins tests/integration/template/test_build.py \
	tests/integration/queue tests/integration/aws/test_aws_playbooks.py \
	tests/integration/hetzner/test_hetzner_playbooks.py tests/integration/gcp/test_gcp_playbooks.py \
	tests/integration/azure/test_azure_playbooks.py tests/integration/localpve/test_by_hand.py
# CORE_SET=ci (.ci/run) runs a part of them: each shipped playbook those above run, at least once, on the try-out
# cluster and on the AWS try-out cloud (5:50 of 11:10 on 2.17). It leaves out the expiry's and the template build's
# long waits, the reruns' reports and the other clouds' playbooks, whose provider code is the same on every release.
CORE_TESTS_CI := tests/integration/create/test_happy.py tests/integration/create/test_lease.py \
	tests/integration/create/test_cleanup_sweep.py tests/integration/destroy tests/integration/archive \
	tests/integration/inventory tests/integration/plugins tests/integration/queue \
	tests/integration/aws/test_aws_playbooks.py tests/integration/localpve/test_by_hand.py
CORE_SET ?= all
CORE_RUN = $(if $(filter ci,$(CORE_SET)),$(CORE_TESTS_CI),$(CORE_TESTS))
test-cores: venv
	set -e; for core in $(CORES); do \
		scripts/core-venv.sh $$core build/ansible-core-$$core $(BIN)/python; \
		echo "== the playbook paths on ansible-core $$core ($(CORE_SET))"; \
		time EPHEMERA_TEST_ANSIBLE=$(abspath build)/ansible-core-$$core/bin \
			$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile $(CORE_RUN); \
	done

# The cloud providers' integration tests alone (Hetzner, Compute Engine, Azure); make test runs them with the rest.
CLOUD_TESTS := tests/integration/hetzner tests/integration/gcp tests/integration/azure \
	tests/integration/localcloud/test_azure.py tests/integration/faults/test_azure_detectors.py \
	tests/integration/faults/test_gcp_detectors.py
test-clouds: venv
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile $(CLOUD_TESTS)

# The crash-safety matrix (docs/internals/faults.md): every kill point and lost response of create, destroy, the expiry sweep
# and the template build (on a debian-tier cluster of its own), the races and seeded random schedules; prints the
# table and writes it as JSON to build/faults-$(FAULTS_PART)-$(FAULTS_SIZE).json. FAULTS_PART: all (the default), or
# the parts make test (test) and make test-long (long: the template build's rows and every cloud's) run at
# FAULTS_SIZE=ci: every point once per variant, as chains (the build's: one chain, rerun only). python -m
# tests.faults matrix --help names every part.
FAULTS_SIZE ?= full
FAULTS_PART ?= all
faults: venv
	@mkdir -p build
	time $(BIN)/python -m tests.faults matrix --part $(FAULTS_PART) --size $(FAULTS_SIZE) \
		--json build/faults-$(FAULTS_PART)-$(FAULTS_SIZE).json

# The matrix's rows of the Hetzner Cloud, Compute Engine and Azure providers, each on the fake of a try-out cloud of
# its own, and the warm pools' fill and claim on AWS, Hetzner Cloud, Compute Engine and Azure (aws-pools,
# hetzner-pools, gcp-pools, azure-pools), side by side (docs/internals/faults.md). make test-long runs them at the ci
# size, with the template build's rows.
faults-clouds: venv
	@mkdir -p build
	time $(BIN)/python -m tests.faults matrix --part clouds --size $(FAULTS_SIZE) \
		--json build/faults-clouds-$(FAULTS_SIZE).json

# The Molecule scenarios (extensions/molecule, docs/internals/awx.md): the create, destroy and archive roles against one try-out
# cluster that the default scenario starts before them and stops after them. make test-long runs them through
# tests/integration/molecule/test_molecule.py, which also shows that no copy of the collection in
# ~/.ansible/collections shadows the checkout.
MOLECULE_DIR ?= $(abspath build/molecule)
molecule: venv
	rm -rf $(MOLECULE_DIR) && mkdir -p $(MOLECULE_DIR)
	PATH="$(abspath $(BIN)):$$PATH" EPHEMERA_COLLECTIONS_PATH="$$($(BIN)/python -m tests.ansible_run collections-path)" \
		EPHEMERA_MOLECULE_DIR=$(MOLECULE_DIR) $(BIN)/molecule test --all --shared-state

SCHEDULES ?= 500
FIRST_SEED ?= 1001
SOAK_JOBS ?= 2
soak: venv
	@mkdir -p build
	$(BIN)/python -m tests.faults soak --schedules $(SCHEDULES) --first-seed $(FIRST_SEED) --jobs $(SOAK_JOBS) \
		--json build/soak.json

# Random schedules on every provider's try-out place with the journal in SQLite and in PostgreSQL
# (tests/faults/fleet.py); SOAK_JOBS places side by side. Hours at the default 500. SEEDS=N,M: those seeds
# instead (the regression seeds: SEEDS=1129,1298,1299).
soak-fleet: venv
	@mkdir -p build
	time $(BIN)/python -m tests.faults soak-fleet \
		$(if $(SEEDS),--seeds $(SEEDS),--schedules $(SCHEDULES) --first-seed $(FIRST_SEED)) \
		--jobs $(SOAK_JOBS) --json build/soak-fleet.json

# PROVIDER=aws|hetzner|gcp|azure: the same job on the try-out cloud (scripts/demo.sh, docs/localcloud.md).
# AGENT=claude-code|codex|opencode: which real agent CLI works in the workspace (docs/agents.md).
# The demo runs in a virtualenv of its own with only what it runs (requirements-demo.txt, and for a try-out cloud
# requirements-demo-cloud.txt and the provider's requirements-<provider>.txt): no ansible package, lint, Molecule.
DEMO_VENV ?= .venv-demo
DEMO_PROVIDER = $(or $(PROVIDER),proxmox)
DEMO_STAMP = $(DEMO_VENV)/.installed-$(DEMO_PROVIDER)
demo: $(DEMO_STAMP)
	ANSIBLE_COLLECTIONS_PATH="$$($(DEMO_VENV)/bin/python -m tests.ansible_run collections-path)" \
		EPHEMERA_DEMO_VENV=$(DEMO_VENV) AGENT=$(AGENT) scripts/demo.sh $(PROVIDER)

$(DEMO_STAMP): requirements.txt requirements-demo.txt requirements-demo-cloud.txt scripts/link-collection.sh
	@scripts/system-packages.sh
	test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install --quiet -r requirements-demo.txt \
		$(if $(filter-out proxmox pve,$(DEMO_PROVIDER)),-r requirements-demo-cloud.txt -r requirements-$(DEMO_PROVIDER).txt)
	scripts/link-collection.sh $(DEMO_VENV)
	touch $@

# The local try-out cluster (tests/localpve, docs/localpve.md). CLUSTER_ARGS go to `up`,
# e.g. make cluster-up CLUSTER_ARGS="--time-scale 0 --addressing dhcp".
cluster-up: venv
	$(BIN)/python -m tests.localpve up $(CLUSTER_ARGS)

cluster-status: venv
	$(BIN)/python -m tests.localpve status

cluster-down: venv
	$(BIN)/python -m tests.localpve down

# The local try-out cloud for AWS (tests/localcloud, docs/localcloud.md): moto behind a fault proxy, with
# real SSH guests. CLOUD_ARGS go to `up`, e.g. make cloud-up CLOUD_ARGS="--region eu-central-1".
cloud-up: venv
	$(BIN)/python -m tests.localcloud up $(CLOUD_ARGS)

cloud-status: venv
	$(BIN)/python -m tests.localcloud status

cloud-down: venv
	$(BIN)/python -m tests.localcloud down

bench-cluster: venv
	$(BIN)/python bench/cluster_startup.py

# 8 processes x 200 fenced journal transitions on SQLite and on PostgreSQL (a server started for the run).
bench-journal: venv
	$(BIN)/python bench/journal.py --contended

bench-journal-tasks: venv
	$(BIN)/python bench/journal_tasks.py

# 10 workspaces x 1 queued operation (forks 10) against 1 x 1: times and their ratio.
bench-queue: venv
	$(BIN)/python bench/queue_parallel.py

# ansible-inventory --list with 100, 1,000 and 10,000 guests: ephemera.workspaces.workspaces against
# community.proxmox.proxmox (with and without want_facts); times, API requests and their ratios.
bench-inventory: venv
	$(BIN)/python bench/inventory.py

# community.proxmox clone+start, one workspace and 20 workspaces from request to ready on one cluster at time scale 0:
# times, steps, API requests, CPU seconds; the last line compares them. PROVIDER=aws: ours to ready against
# amazon.aws.ec2_instance launching and waiting for one instance on the try-out cloud (bench/create_aws.py).
bench-create: venv
	$(BIN)/python bench/create.py $(if $(PROVIDER),--provider $(PROVIDER))

# One ready workspace forked into 4 children against 4 cold creates, on the try-out cluster (bench/fork.py).
bench-fork: venv
	$(BIN)/python bench/fork.py

# A create that takes a warm pool member against a cold one and community.proxmox, at time scale 0 (bench/warm.py).
bench-warm: venv
	$(BIN)/python bench/warm.py $(WARM_ARGS)

# A create at Ansible's internal_poll_interval (1 ms) against the 10 ms the tests use: CPU seconds, wall, ratios.
bench-poll: venv
	$(BIN)/python bench/poll.py

# One task of the collection as a module process against the same module run in the worker by its action plugin,
# with and without the module's code loaded before the workers are forked (plugin_utils/in_process.py).
bench-step: venv
	$(BIN)/python bench/step_cost.py

# Time and API requests of one reconcile: 1,000 journal records against 2,000 containers.
bench-reconcile: venv
	$(BIN)/python bench/reconcile.py

# Expiry sweeps over 1,000 leased workspaces, each a real guest (two made by the create playbook, the others forked
# from them): 900 live (750 agents working, 150 done) and 100 expired, 50 released by each sweep (archived and
# deleted); one sweep at parallel 8, one at 32: times, requests. PROVIDER=aws: the same on the AWS try-out cloud.
bench-expire: venv
	$(BIN)/python bench/expire.py --parallel 8,32 $(if $(PROVIDER),--provider $(PROVIDER))

# The real claude-code, codex and opencode against a stand-in agent: create to ready, first edit and idle, by step.
bench-agent: venv
	$(BIN)/python bench/agent.py

# A template build on the debian guest tier split by step, then create-to-ready from it against the default tier.
bench-template: venv
	$(BIN)/python bench/template.py
