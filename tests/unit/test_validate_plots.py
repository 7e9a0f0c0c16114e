"""The plot functions draw what they are given (PNG files from synthetic data; no root, no display)."""

import numpy as np

from testbed.validate import plots


def _png(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_long_haul_timeseries_side_by_side_and_gain_band(tmp_path):
    t = np.linspace(0, 0.01, 200)
    mode = {"qp_rates": {17: (t, 5e9 + 1e9 * np.sin(t * 900)), 18: (t, 5e9 - 1e9 * np.sin(t * 900))},
            "queue": (t, 40 + 30 * np.sin(t * 900)), "cnp_times": {17: [0.001, 0.004], 18: [0.002]}}
    assert _png(plots.plot_long_haul_timeseries({"ecn": mode, "fast-cnp": mode}, tmp_path / "ts.png", "30 km"))
    points = [{"distance_km": d, "mean": g, "low": g - 0.02, "high": g + 0.02}
              for d, g in ((0, 0.0), (30, 0.06), (100, 0.4))]
    pred = [{"distance_km": d, "gain": g} for d, g in ((0, 0.0), (30, 0.058), (100, 0.42))]
    assert _png(plots.plot_gain_vs_distance(points, tmp_path / "gain.png", pred))
    band = [{"distance_km": d, "gain": g, "low": g - 0.1, "high": g + 0.05} for d, g in ((30, 0.05), (100, 0.3))]
    plain = (tmp_path / "gain.png").stat().st_size
    assert _png(plots.plot_gain_vs_distance(points, tmp_path / "gain.png", pred, discrete=band))
    assert (tmp_path / "gain.png").stat().st_size != plain           # the discrete band is drawn
    single = [{"distance_km": 30, "mean": 0.05, "low": None, "high": None}]
    assert _png(plots.plot_gain_vs_distance(single, tmp_path / "one.png"))


def test_row_plots(tmp_path):
    t = np.linspace(0, 1, 50)
    data = {"t": t, "model_rates": np.ones((50, 2)), "replica_rates": np.ones((50, 2)), "model_queue": t,
            "replica_queue": t, "scale": 10, "kmin": 5, "kmax": 40, "window": (0.1, 0.5)}
    assert _png(plots.plot_dcqcn(data, tmp_path / "d.png"))
    assert _png(plots.plot_ccdf([0.01, 0.02, 0.5], tmp_path / "c.png", "gaps"))
    bins = [{"depth_from": 10, "depth_to": 14, "expected": 0.1, "observed": 0.12}]
    assert _png(plots.plot_red(bins, {"kmin": 10, "kmax": 50, "pmax": 0.5}, tmp_path / "r.png"))
    assert _png(plots.plot_bars("delay", 1.1, 1.0, "ms", tmp_path / "b.png"))
