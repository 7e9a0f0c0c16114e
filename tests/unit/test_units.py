import pytest

from testbed.dilation import Dilation, pick_scale
from testbed.errors import SpecError
from testbed.units import parse_distance, parse_duration, parse_rate, parse_size


@pytest.mark.parametrize("text,value", [("400G", 400e9), ("100Mbps", 100e6), ("25gbit", 25e9), (1000, 1000.0)])
def test_rates(text, value):
    assert parse_rate(text, "f") == value


def test_durations_sizes_distances():
    assert parse_duration("55us", "f") == pytest.approx(55e-6)
    assert parse_duration("10ms", "f") == pytest.approx(0.01)
    assert parse_size("32MB", "f") == 32e6
    assert parse_size("64KiB", "f") == 65536
    assert parse_distance("30km", "f") == 30000


@pytest.mark.parametrize("bad", ["fast", "10 parsecs", "-5km", True, [1]])
def test_bad_values_name_the_field(bad):
    with pytest.raises(SpecError) as err:
        parse_distance(bad, "links.dci.distance")
    assert err.value.field == "links.dci.distance"


def test_dilation_preserves_bdp_in_packets():
    d = Dilation(1000)
    rate, rtt, mtu = 400e9, 300e-6, 1500
    real_bdp = rate * rtt / (8 * mtu)
    emu_bdp = d.rate(rate) * d.time(rtt) / (8 * mtu)
    assert emu_bdp == pytest.approx(real_bdp)
    assert d.real_time(d.time(55e-6)) == pytest.approx(55e-6)


def test_pick_scale_rounds_to_readable_factors():
    assert pick_scale(50e6) == 1.0
    assert pick_scale(400e9, 100e6) == 5000.0
    assert pick_scale(100e9, 100e6) == 1000.0
    with pytest.raises(SpecError):
        Dilation(0)
