"""Test VMs on Debian's stock kernel: the pure half (recipe, cache key, qemu argv). Root glue: testbed.emu.vm."""
