"""LinkParams: spec validation naming the field, defaults, time dilation."""

import pytest

from testbed.dilation import Dilation
from testbed.errors import SpecError
from testbed.links.model import BYTES, PACKETS, LinkParams, LossModel, RedParams


def test_full_spec_block_parses_into_si_units():
    p = LinkParams.from_spec({"rate": "100G", "distance": "30km", "jitter": "10us", "loss": "1%",
                              "queue": "10MB", "red": {"kmin": "100KB", "kmax": "400KB", "pmax": "20%"}})
    assert p.rate_bps == 100e9
    assert p.one_way_delay_s == pytest.approx(150e-6)  # 5 us/km
    assert p.jitter_s == pytest.approx(10e-6)
    assert p.loss.mean == pytest.approx(0.01)
    assert p.queue_limit == (10e6, BYTES)
    assert (p.red.kmin, p.red.kmax, p.red.pmax, p.red.unit, p.red.ecn) == (100e3, 400e3, 0.2, BYTES, True)


@pytest.mark.parametrize("block,field", [
    ({"delay": "-5ms"}, "links.dci.link.delay"),
    ({"delay": "5ms", "distance": "3km"}, "links.dci.link.delay"),
    ({"rate": "0"}, "links.dci.link.rate"),
    ({"jitter": "fast"}, "links.dci.link.jitter"),
    ({"loss": "150%"}, "links.dci.link.loss"),
    ({"loss": {"model": "gilbert-elliott", "p": "1%"}}, "links.dci.link.loss.r"),
    ({"loss": {"model": "bursty", "p": 0.1, "r": 0.2}}, "links.dci.link.loss.model"),
    ({"queue": "100B"}, "links.dci.link.queue"),
    ({"queue": 0}, "links.dci.link.queue"),
    ({"red": {"kmin": "400KB", "kmax": "100KB", "pmax": 0.1}}, "links.dci.link.red.kmin"),
    ({"red": {"kmin": "10KB", "kmax": "100KB", "pmax": 1.5}}, "links.dci.link.red.pmax"),
    ({"red": {"kmin": "10p", "kmax": "100KB", "pmax": 0.1}}, "links.dci.link.red.kmax"),
    ({"red": {"kmin": "10KB", "kmax": "100KB"}}, "links.dci.link.red.pmax"),
    ({"red": {"kmin": "10KB", "kmax": "100KB", "pmax": 0.1, "ecn": "yes"}}, "links.dci.link.red.ecn"),
    ({"colour": "blue"}, "links.dci.link.colour"),
])
def test_bad_parameters_name_the_field(block, field):
    with pytest.raises(SpecError) as err:
        LinkParams.from_spec(block, "links.dci.link")
    assert err.value.field == field


def test_constructor_validates_too():
    with pytest.raises(SpecError, match="delay"):
        LinkParams(delay_s=-1e-3)
    with pytest.raises(SpecError, match="kmin"):
        RedParams(kmin=10, kmax=5, pmax=0.1)
    with pytest.raises(SpecError, match="pmax"):
        RedParams(kmin=1, kmax=5, pmax=2)


def test_scaling_keeps_buffers_and_curve_but_dilates_time():
    real = LinkParams.from_spec({"rate": "400G", "distance": "30km", "jitter": "1us", "queue": 64,
                                 "red": {"kmin": "20p", "kmax": "40p", "pmax": 0.2}, "loss": 0.001})
    emu = real.scaled(Dilation(1000))
    assert emu.rate_bps == pytest.approx(400e6)
    assert emu.delay_s == pytest.approx(0.15)
    assert emu.jitter_s == pytest.approx(1e-3)
    assert emu.queue_limit == (64, PACKETS)
    assert emu.red == real.red and emu.loss == real.loss
    # BDP in packets preserved
    assert real.rate_bps * real.one_way_delay_s == pytest.approx(emu.rate_bps * emu.delay_s)


def test_edge_defaults_fill_only_unset_fields():
    p = LinkParams.from_spec({"loss": "1%"}).with_defaults(rate_bps=10e9, delay_s=1e-6)
    assert (p.rate_bps, p.delay_s) == (10e9, 1e-6)
    q = LinkParams.from_spec({"rate": "1G", "distance": "10km"}).with_defaults(rate_bps=10e9, delay_s=1e-6)
    assert q.rate_bps == 1e9 and q.one_way_delay_s == pytest.approx(50e-6)
    r = LinkParams().with_defaults(rate_bps=10e9, distance_m=2000)
    assert r.one_way_delay_s == pytest.approx(10e-6)


def test_needs_delay_line_only_beyond_plain_rate():
    assert not LinkParams(rate_bps=1e9).needs_delay_line
    assert LinkParams(rate_bps=1e9, delay_s=1e-3).needs_delay_line
    assert LinkParams(loss=LossModel(rate=0.01)).needs_delay_line
    assert not LinkParams(loss=LossModel(rate=0.0)).needs_delay_line
    assert LinkParams(rate_bps=1e9, red=RedParams(1, 2, 0.1)).needs_delay_line


def test_dict_round_trip_and_describe():
    p = LinkParams.from_spec({"rate": "100M", "delay": "50ms", "loss": {"model": "gilbert-elliott", "p": "1%",
                              "r": "25%"}, "queue": "64p", "red": {"kmin": 5, "kmax": 20, "pmax": 0.5}})
    assert LinkParams.from_dict(p.to_dict()) == p
    text = p.describe()
    assert "100 Mbit/s" in text and "50 ms" in text and "burst" in text and "RED 5-20 packets" in text


def test_gilbert_elliott_mean_loss():
    ge = LossModel.from_spec({"model": "gilbert-elliott", "p": 0.01, "r": 0.25})
    assert ge.mean == pytest.approx(0.01 / 0.26)
