"""KeepAwake (no root): one SCHED_IDLE spinner per usable CPU, pinned to it, gone after the block; and
CpuWatch leaves the spinners' CPU out of the machine's, told or not."""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed.emu.awake import KeepAwake
from testbed.poll import poll


class Run:
    def spawn(self, argv, **kw):
        return subprocess.Popen(argv, start_new_session=True, **kw)


def test_one_idle_class_spinner_per_cpu_and_none_left():
    with KeepAwake(Run()) as awake:
        cpus = sorted(os.sched_getaffinity(0))
        assert len(awake.pids) == len(cpus)
        poll(lambda: all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in awake.pids), timeout=10,
             what="spinners in SCHED_IDLE")
        assert [sorted(os.sched_getaffinity(p)) for p in awake.pids] == [[c] for c in cpus]
        pids = awake.pids
    for p in pids:
        assert not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().split()[2] == "Z"


def _spinner_pids() -> list[int]:
    """Every keep-awake spinner on the machine, found here by its mark, not by the code under test: in
    ``make test`` the integration session's own spinners may run beside this test's."""
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and b"testbed-keep-awake" in open(f"/proc/{d}/cmdline", "rb").read():
                out.append(int(d))
        except OSError:
            pass
    return out


def _ticks(pids) -> int:
    """utime + stime of ``pids`` (fields 14, 15 of /proc/PID/stat), read here, not by the code under test."""
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


def test_cpu_watch_leaves_the_spinners_out_untold():
    from testbed.emu.cpustat import busy_fraction, host_cpu_times
    from testbed.emu.health import CpuWatch

    with KeepAwake(Run()) as awake:
        poll(lambda: all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in awake.pids), timeout=10,
             what="spinners in SCHED_IDLE")
        spinners_now = _spinner_pids()
        assert set(awake.pids) <= set(spinners_now)
        before, spun0 = host_cpu_times(), _ticks(spinners_now)
        with CpuWatch([]) as cpu:   # not told about the spinners: it finds them by their mark
            poll(lambda: len(cpu.machine) >= 3, timeout=10, interval=0.1, what="three CPU samples")
            probe_ticks = _ticks([cpu.probe.pid])   # its timer probe, left out of the busy share too
        after, spun1 = host_cpu_times(), _ticks(spinners_now)
        raw = busy_fraction(before, after)
    spinners = (spun1 - spun0) / (sum(after) - sum(before))   # their share of all CPUs, 0..1
    probe = probe_ticks / (sum(after) - sum(before))
    assert raw > 0.8                                          # the spinners fill every CPU...
    assert spinners > 0.1                                     # (they ran: whatever else runs, they get the rest)
    # ...and are not counted: what the watch reports is the machine's busy share without theirs (nor the
    # probe's), whatever else the machine runs meanwhile (it counts in both); closer to that than to the raw
    assert cpu.summary()["machine_mean"] == pytest.approx((raw - spinners - probe) * 100, abs=spinners * 100 / 2)


def test_wanted_on_a_vm_not_on_bare_metal_and_the_environment_decides(tmp_path):
    from testbed.emu.awake import wanted

    vm, metal = tmp_path / "vm", tmp_path / "metal"
    vm.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor avx\n")
    metal.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 avx\n")
    none = lambda: None   # noqa: E731 - no cpuid device
    assert wanted({}, vm, none)[0] is True and wanted({}, metal, none)[0] is False
    assert wanted({"TESTBED_KEEP_AWAKE": "0"}, vm, none) == (False, "TESTBED_KEEP_AWAKE=0")
    assert wanted({"TESTBED_KEEP_AWAKE": "1"}, metal, none) == (True, "TESTBED_KEEP_AWAKE=1")
    assert wanted({}, tmp_path / "absent", none)[0] is False


# /proc/cpuinfo excerpts as the kernel prints them: the test VM (QEMU 7.2 TCG, -cpu max), a KVM guest
# (this project's CI machine: the hypervisor flag, the host's model) and bare metal.
TCG_CPUINFO = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: QEMU TCG CPU version 2.5+\n"
               "flags\t\t: fpu de pse tsc msr sse2 rdrand hypervisor lahf_lm svm\n")
KVM_CPUINFO = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n"
               "flags\t\t: fpu vme sse2 hypervisor avx\n")
METAL_CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu vme sse2 avx\n"


@pytest.mark.parametrize("cpuinfo, vendor, kind", [
    (TCG_CPUINFO, None, "tcg"),                     # no cpuid device: the model name QEMU gives TCG
    (TCG_CPUINFO, "TCGTCGTCGTCG", "tcg"),
    (KVM_CPUINFO.replace("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "QEMU Virtual CPU version 2.5+"),
     "TCGTCGTCGTCG", "tcg"),                        # -cpu qemu64 under TCG: only CPUID tells
    (KVM_CPUINFO.replace("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "QEMU Virtual CPU version 2.5+"),
     "KVMKVMKVM", "vm"),                            # the same model name under KVM
    (KVM_CPUINFO, None, "vm"),
    (KVM_CPUINFO, "KVMKVMKVM", "vm"),
    (METAL_CPUINFO, None, "metal"),
])
def test_machine_kind_tells_tcg_from_a_vm_and_metal(cpuinfo, vendor, kind):
    from testbed.emu.awake import machine_kind

    assert machine_kind(cpuinfo, vendor) == kind


def test_no_spinners_in_a_tcg_guest_unless_forced(tmp_path):
    from testbed.emu.awake import wanted

    tcg, kvm = tmp_path / "tcg", tmp_path / "kvm"
    tcg.write_text(TCG_CPUINFO)
    kvm.write_text(KVM_CPUINFO)
    on, why = wanted({}, tcg, vendor=lambda: None)
    assert on is False and "TCG" in why
    assert wanted({}, kvm, vendor=lambda: None)[0] is True
    assert wanted({}, kvm, vendor=lambda: "TCGTCGTCGTCG")[0] is False
    assert wanted({"TESTBED_KEEP_AWAKE": "1"}, tcg, vendor=lambda: None) == (True, "TESTBED_KEEP_AWAKE=1")


def test_hypervisor_vendor_reads_cpuid_leaf_0x40000000(tmp_path):
    from testbed.emu.awake import hypervisor_vendor

    assert hypervisor_vendor(tmp_path / "absent") is None
    fake = tmp_path / "cpuid"   # the cpuid device: a read at offset LEAF gives EAX EBX ECX EDX
    with open(fake, "wb") as f:
        f.seek(0x40000000)   # sparse
        f.write((0x40000001).to_bytes(4, "little") + b"TCGTCGTCGTCG")
    assert hypervisor_vendor(fake) == "TCGTCGTCGTCG"


def test_machine_awake_off_starts_nothing_and_records_why():
    from testbed.emu.awake import for_machine

    with for_machine(environ={"TESTBED_KEEP_AWAKE": "0"}) as awake:
        assert awake.pids == [] and awake.record() == {"on": False, "why": "TESTBED_KEEP_AWAKE=0", "spinners": 0}
    with for_machine(environ={"TESTBED_KEEP_AWAKE": "1"}) as awake:
        assert len(awake.pids) == len(os.sched_getaffinity(0)) and awake.record()["spinners"] == len(awake.pids)


def test_spinners_die_with_a_starter_killed_by_sigkill():
    import sys

    from testbed.emu.cpustat import spinner_pids

    before = set(spinner_pids())
    starter = subprocess.Popen([sys.executable, "-c",
                                "import sys, time\nfrom testbed.emu.awake import KeepAwake\n"
                                "with KeepAwake():\n    print('up', flush=True)\n    time.sleep(600)\n"],
                               stdout=subprocess.PIPE, text=True)
    assert starter.stdout.readline().strip() == "up"
    poll(lambda: len(set(spinner_pids()) - before) == len(os.sched_getaffinity(0)), timeout=10,
         what="the starter's spinners")
    mine = set(spinner_pids()) - before
    starter.kill()      # no teardown runs: only PR_SET_PDEATHSIG can end them
    starter.wait()
    poll(lambda: not mine & set(spinner_pids()), timeout=10, what="spinners ended with their starter")


def test_bench_collective_runs_without_spinners_unless_asked(tmp_path):
    from testbed.commands.bench import AWAKE_OFF, awake_environ
    from testbed.emu.awake import wanted

    vm = tmp_path / "vm"
    vm.write_text("processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor avx\n")   # a VM: spinners by default
    kvm = lambda: "KVMKVMKVM"    # noqa: E731
    assert wanted({}, vm, kvm)[0] is True
    env, why = awake_environ(AWAKE_OFF["collective"], {})
    assert wanted(env, vm, kvm)[0] is False and why == AWAKE_OFF["collective"]
    env, why = awake_environ(AWAKE_OFF["collective"], {"TESTBED_KEEP_AWAKE": "1"})     # the user's choice wins
    assert wanted(env, vm, kvm) == (True, "TESTBED_KEEP_AWAKE=1") and why is None
    env, why = awake_environ(None, {})                                                  # other benchmarks: as before
    assert wanted(env, vm, kvm)[0] is True and why is None
