"""The safety layer between policy and robot: watchdog, latched e-stop and faults, fade-in, limits; always finite."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.runtime.safety import SafetyConfig, SafetyLayer

DT = 0.002
CFG = SafetyConfig(low=(-1.0, 0.0), high=(1.0, 2.0), max_rate=(50.0, -1.0), watchdog_s=0.01, fade_in_s=0.1)


def layer(**kw: object) -> SafetyLayer:
    cfg = SafetyConfig(**{**CFG.__dict__, **kw})  # type: ignore[arg-type]
    s = SafetyLayer(cfg, DT, np.array([0.0, 1.0]))
    s.activate(0.0)
    return s


def test_fade_in_blends_from_the_start_command() -> None:
    s = layer(max_rate=(-1.0, -1.0))
    first = s.step(0.0, np.array([1.0, 2.0]))
    assert first.blend == 0.0 and first.command.tolist() == [0.0, 1.0]
    s.input_received(0.05)
    half = s.step(0.05, np.array([1.0, 2.0]))
    assert half.blend == pytest.approx(0.5) and half.command == pytest.approx([0.5, 1.5])
    s.input_received(0.2)
    assert s.step(0.2, np.array([1.0, 2.0])).command.tolist() == [1.0, 2.0]


def test_watchdog_trips_latches_and_sends_the_safe_command() -> None:
    s = layer(safe_mode="zero", fade_in_s=0.0)
    s.step(0.0, np.array([0.5, 1.5]))
    stale = s.step(0.011, np.array([0.5, 1.5]))  # no input for longer than watchdog_s
    assert stale.fault == "watchdog" and stale.command.tolist() == [0.0, 0.0]
    s.input_received(0.012)
    assert s.step(0.012, np.array([0.5, 1.5])).fault == "watchdog"  # latched: fresh inputs do not clear it
    s.activate(0.02)
    assert s.step(0.02, np.array([0.1, 0.1])).fault == ""


def test_estop_latches_until_released_and_reactivated() -> None:
    s = layer(safe_mode="command", safe_command=(0.0, 0.3), fade_in_s=0.0)
    s.estop(True)
    assert s.step(0.0, np.array([1.0, 1.0])).command.tolist() == pytest.approx([0.0, 0.3])
    s.activate(0.001)
    assert s.step(0.001, np.array([1.0, 1.0])).fault == "e-stop"  # still engaged
    s.estop(False)
    assert s.step(0.002, np.array([1.0, 1.0])).fault == "e-stop"  # released, but latched
    s.activate(0.003)
    assert s.step(0.003, np.array([0.2, 0.2])).fault == ""


def test_a_non_finite_command_trips_and_is_never_sent() -> None:
    s = layer(fade_in_s=0.0)
    s.step(0.0, np.array([0.4, 0.4]))
    out = s.step(0.001, np.array([math.nan, 1.0]))
    assert out.fault == "non-finite command" and np.isfinite(out.command).all()
    assert out.command.tolist() == pytest.approx([0.1, 0.4])  # hold the last (rate-limited) command


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.sampled_from([0.1, 10.0, 1e6]))
def test_outputs_stay_finite_within_limits_and_rate(seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    s = layer()
    prev = s.step(0.0, None).command
    for k in range(1, 200):
        proposal = scale * rng.standard_normal(2)
        if rng.random() < 0.02:
            proposal[rng.integers(2)] = rng.choice([math.nan, math.inf, -math.inf])
        s.input_received(k * DT)
        out = s.step(k * DT, proposal).command
        assert np.isfinite(out).all()
        assert (out >= np.float32([-1.0, 0.0])).all() and (out <= np.float32([1.0, 2.0])).all()
        assert abs(float(out[0]) - float(prev[0])) <= 50.0 * DT + 1e-6
        prev = out


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="safe_mode must be one of"):
        SafetyConfig((0.0,), (1.0,), (1.0,), safe_mode="descend")
    with pytest.raises(ValueError, match="every low must be <= high"):
        SafetyConfig((2.0,), (1.0,), (1.0,))
    with pytest.raises(ValueError, match="needs safe_command with 1 values"):
        SafetyConfig((0.0,), (1.0,), (1.0,), safe_mode="command")


def test_nan_settings_cannot_switch_limits_off_or_reach_a_motor() -> None:
    with pytest.raises(ValueError, match="max_rate must be a number"):
        SafetyConfig((0.0,), (1.0,), (math.nan,))
    with pytest.raises(ValueError, match="safe_command must be finite"):
        SafetyConfig((0.0,), (1.0,), (1.0,), safe_mode="command", safe_command=(math.nan,))
    with pytest.raises(ValueError, match="every low must be <= high"):
        SafetyConfig((-math.inf,), (1.0,), (1.0,))
