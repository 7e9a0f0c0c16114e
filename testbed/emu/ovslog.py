"""The part of ovs-vswitchd's log a run wrote, saved beside its results (root glue, file reads only).

When a replica misbehaves inside Open vSwitch (a controller connection dropped by the inactivity probe,
"error sending Ethernet packet", a port that took long to report down), the evidence is in the
machine-wide ``ovs-vswitchd.log``, which nobody copies and the next runs bury. :class:`LogTail` notes the
log's size when a replica starts and, when it stops, copies what was appended since into the run's
folder (the last ``max_bytes`` of it). The log is the machine's: lines of another run at the same time
are in it too (runs take the emulation lock, so rarely). Rotation between start and stop (the file is
shorter than at start) copies the new file from its beginning.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Where Debian's ovs-ctl writes it (OVS_LOGDIR overrides, as for ovs-ctl itself).
DEFAULT_LOG = Path(os.environ.get("OVS_LOGDIR", "/var/log/openvswitch")) / "ovs-vswitchd.log"
MAX_BYTES = 4 << 20


class LogTail:
    def __init__(self, path: Path = DEFAULT_LOG):
        self.path = Path(path)
        self.start = self._size()

    def _size(self) -> int | None:
        try:
            return self.path.stat().st_size
        except OSError:
            return None

    def save(self, dest: Path, max_bytes: int = MAX_BYTES) -> int:
        """Copy what was appended since construction to ``dest``; returns the bytes written (0: nothing
        appended, no log, or it could not be read; no file is written then)."""
        end = self._size()
        if end is None:
            return 0
        begin = self.start or 0
        if end < begin:        # rotated: the new file is all this run's (and later)
            begin = 0
        start = max(begin, end - max_bytes)
        if end <= start:
            return 0
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
        except OSError:
            return 0
        if start > begin and b"\n" in data:   # cut to whole lines when truncated (also after a rotation)
            data = data[data.index(b"\n") + 1:]
        Path(dest).write_bytes(data)
        return len(data)
