"""Test oracles for plotted curves."""
from __future__ import annotations


def cdf_at(xs: list[float], ys: list[float], x: float) -> float:
    """Height at x of the piecewise-linear CDF report/series.cdf_points draws."""
    if not xs or x < xs[0]:
        return 0.0
    for k in range(1, len(xs)):
        if x <= xs[k]:
            if xs[k] == xs[k - 1]:
                return ys[k]
            return ys[k - 1] + (ys[k] - ys[k - 1]) * (x - xs[k - 1]) / (xs[k] - xs[k - 1])
    return 1.0
