# scaleout-testbed. Two commands do everything on a fresh machine:
#   sudo make demo    setup, then the default scenario
#   sudo make test    setup, then the whole test suite
# and one more for the kernel path (netem, RED, OVS kernel datapath, rdma_rxe) in a QEMU VM:
#   sudo make vm-test (docs/vm.md)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST ?= $(PY) -m pytest
# Emulation runs take a machine-wide lock; tests queue for it rather than fail when others run.
export TESTBED_LOCK_WAIT ?= 900

.PHONY: setup demo test vm-test cluster-vm-test vagrant-cluster-test kernel-test link-fidelity failover-vm unit integration lint clean help

help:
	@echo "sudo make demo    set up this machine, then run the default scenario"
	@echo "sudo make test    set up this machine, then run the whole test suite"
	@echo "sudo make vm-test build/boot the test VM (Debian's kernel) and run the kernel-backend tests in it"
	@echo "sudo make kernel-test  those kernel-backend tests here (a VM whose kernel has netem/RED/OVS/rxe)"
	@echo "sudo make cluster-vm-test  a k=4 fat-tree split over two VMs with sshd (docs/cluster.md)"
	@echo "sudo make vagrant-cluster-test  vagrant/cluster/Vagrantfile for real (local box, libvirt, TCG; ~8 min)"
	@echo "make unit         unit tests only (no root)"
	@echo "make lint         ruff"
	@echo "sudo make clean   remove everything testbed runs left behind (testbed clean)"

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/testbed run long_haul_cnp --quick

test: setup
	$(PYTEST) -q --durations=30 tests/unit tests/integration

vm-test: setup
	@bash scripts/vm/host-setup.sh
	$(PY) -m testbed.emu.vmtest

# docs/cluster.md: only the k=4 fat-tree split over two QEMU VMs with sshd (vm-test runs it too; ~5 min).
cluster-vm-test: setup
	@bash scripts/vm/host-setup.sh
	$(PY) -m testbed.emu.vmtest -- -k test_cluster_vm

# vagrant/README.md: vagrant/cluster/Vagrantfile run for real (Debian's vagrant + vagrant-libvirt, a local
# stand-in for the pinned box built from the VM image, TCG), the partitioned scenario in it, then torn
# down. Manual: not part of test or CI (too slow).
vagrant-cluster-test: setup
	PY=$(PY) bash scripts/vagrant/cluster-test.sh

# docs/link-fidelity.md: kernel tc vs the userspace delay line (links, then the long haul), side by side in the test VM.
link-fidelity: setup
	@bash scripts/vm/host-setup.sh
	$(PY) -m testbed.bench.link_vm

# docs/sdn.md: link-cut outages on OVS's userspace vs kernel datapath, side by side in the test VM (~15 min).
failover-vm: setup
	@bash scripts/vm/host-setup.sh
	$(PY) -m testbed.bench.failover_vm

# The kernel-backend subset (tests/vm/guest) on a machine whose kernel has netem, RED, the OVS kernel
# datapath and rdma_rxe: what vm-test runs inside its QEMU VM, and what a Vagrant VM runs directly.
kernel-test:
	TESTBED_KERNEL_TESTS=1 $(PYTEST) -p no:cacheprovider -q tests/vm/guest

unit:
	$(PYTEST) -q tests/unit

integration:
	$(PYTEST) -q tests/integration

lint:
	$(VENV)/bin/ruff check testbed controllers scenarios tests

clean:
	$(VENV)/bin/testbed clean
