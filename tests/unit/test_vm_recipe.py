"""The test VM's recipe and QEMU command line (pure; testbed.vm.recipe)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.errors import UsageError
from testbed.vm import recipe

REPO = Path(__file__).resolve().parents[2]


def _cfg(**kw):
    base = dict(name="vm0", kernel=Path("/c/vmlinuz"), initrd=Path("/c/initrd.cpio"), console_log=Path("/o/c.log"))
    return recipe.VMConfig(**{**base, **kw})


def test_key_changes_with_any_recipe_file_package_or_extra_and_not_with_order():
    files = {name: (REPO / name).read_bytes() for name in recipe.RECIPE_FILES}
    key = recipe.recipe_key(files)
    assert key == recipe.recipe_key(dict(reversed(list(files.items()))))
    for name in files:
        assert recipe.recipe_key({**files, name: files[name] + b"\n"}) != key, name
    assert recipe.recipe_key(files, recipe.PACKAGES + ("gcc",)) != key
    assert recipe.recipe_key(files, extra=("p4tools:abc",)) != key


def test_recipe_files_exist_and_setup_sh_is_part_of_the_recipe():
    for name in recipe.RECIPE_FILES:
        assert (REPO / name).is_file(), name
    assert "scripts/setup.sh" in recipe.RECIPE_FILES   # the Vagrant provisioning is what the image runs


def test_qemu_argv_tcg_no_default_network_shares_and_a_unix_socket_link(tmp_path):
    link = recipe.Link("l0", tmp_path / "l.sock", listen=True, mac=recipe.mac_address(0, 0))
    argv = recipe.qemu_argv(_cfg(shares=(recipe.Share("src", Path("/repo"), readonly=True),), links=(link,)))
    joined = " ".join(argv)
    assert argv[argv.index("-accel") + 1] == "tcg" and argv[argv.index("-cpu") + 1] == "max"
    assert "-nodefaults" in argv and "-no-reboot" in argv and "user" not in joined.replace("-no-user-config", "")
    assert "local,path=/repo,mount_tag=src,security_model=none,id=src,readonly=on" in argv
    assert f"stream,id=l0,server=on,addr.type=unix,addr.path={tmp_path / 'l.sock'}" in argv
    assert "virtio-net-pci,netdev=l0,mac=52:54:00:5b:00:00" in argv
    assert "rdinit=/init" in argv[argv.index("-append") + 1]
    assert argv[argv.index("-serial") + 1] == "file:/o/c.log"


def test_kvm_argv_and_probe_boot_without_root():
    argv = recipe.qemu_argv(_cfg(accel="kvm"))
    assert argv[argv.index("-accel"):argv.index("-accel") + 4] == ["-accel", "kvm", "-cpu", "host"]
    probe = recipe.kvm_probe_argv(Path("/k"), Path("/c.log"))
    assert "-initrd" not in probe and "panic=1" in probe[probe.index("-append") + 1]


@pytest.mark.parametrize("kw, field", [({"memory_mb": 1024}, "vm.memory_mb"), ({"accel": "xen"}, "vm.accel"),
                                       ({"cpus": 0}, "vm.cpus"), ({"name": "a b"}, "vm.name")])
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(UsageError, match=field):
        _cfg(**kw)


def test_macs_unique_and_locally_administered():
    macs = {recipe.mac_address(v, i) for v in range(4) for i in range(4)}
    assert len(macs) == 16 and all(int(m.split(":")[0], 16) & 0x02 for m in macs)


def test_job_script_quotes_env_and_cwd():
    text = recipe.job_script("echo \"$X\"", env={"X": "it's"}, cwd="/a b")
    assert "cd '/a b' || exit 125" in text and "export X='it'\"'\"'s'" in text
    with pytest.raises(UsageError, match="not a valid variable"):
        recipe.job_script("true", env={"1X": "y"})
