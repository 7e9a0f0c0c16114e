"""Backend choice from capabilities (pure)."""

from __future__ import annotations

import pytest

from testbed.doctor import NAMES, pick_backends


def _caps(*present):
    return {n: {"present": n in present, "detail": ""} for n in NAMES}


@pytest.mark.parametrize("present, want", [
    (("veth", "ovs_user", "bmv2", "p4c"),                # this machine
     {"switch": "ovs-user", "delay": "userspace", "ecn": "userspace", "rdma": "soft"}),
    (("veth", "netem", "red", "ovs_kernel", "ovs_user", "rxe"),
     {"switch": "ovs-kernel", "delay": "netem", "ecn": "red", "rdma": "soft"}),  # rxe: reported, not picked
    (("bmv2", "p4c"), {"switch": "bmv2-only", "delay": "none", "ecn": "bmv2", "rdma": "soft"}),
    (("bmv2",), {"switch": "none", "delay": "none", "ecn": "none", "rdma": "soft"}),
])
def test_pick_backends(present, want):
    assert pick_backends(_caps(*present)) == want
