"""Link emulation: one link model in real units (:mod:`.model`), scaled by the replica's time dilation,
emulated by tc (:mod:`.tc`) where the kernel can, else by a userspace delay line (:mod:`.delayline`).
See docs/links.md."""
