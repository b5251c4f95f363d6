"""Energy-tank properties (shared/references.md), property-based over random and adversarial command streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.runtime import ContractError
from policies.runtime.passivity import EnergyTank, TankParams

STREAMS = settings(max_examples=60, deadline=None)


def params_strategy() -> st.SearchStrategy[TankParams]:
    return st.builds(
        lambda t_min, extra, fill, margin, d: TankParams(
            t_init=t_min + fill * extra, t_min=t_min, t_max=t_min + extra, margin=margin, damping=(d,)
        ),
        st.floats(0.01, 1.0),
        st.floats(0.1, 10.0),
        st.floats(0.0, 1.0),
        st.floats(0.0, 0.05),
        st.floats(0.0, 2.0),
    )


def run_torque(params: TankParams, tau: np.ndarray, dt: float) -> dict[str, np.ndarray]:
    """Explicit-Euler plant (unit inertia, light friction): the motion over a step is ``qdot dt``, as predicted."""
    j = tau.shape[1]
    tank = EnergyTank(params, j)
    q, qd = np.zeros(j), np.zeros(j)
    out: dict[str, list[float]] = {k: [] for k in ("tank", "alpha", "injected", "harvested", "overflow", "budget")}
    for k in range(len(tau)):
        out["budget"].append(tank.tank - params.t_min - params.margin)
        r = tank.torque(tau[k], q, qd, dt)
        for key in ("tank", "alpha", "injected", "harvested", "overflow"):
            out[key].append(getattr(r, key))
        q = q + qd * dt
        qd = qd + (r.command - 0.1 * qd) * dt
    return {k: np.asarray(v) for k, v in out.items()}


@STREAMS
@given(
    params=params_strategy(),
    seed=st.integers(0, 2**16),
    bias=st.floats(-5.0, 20.0),
    dt=st.sampled_from([1e-3, 2e-3, 1e-2]),
)
def test_torque_tank_invariants(params: TankParams, seed: int, bias: float, dt: float) -> None:
    tau = np.random.default_rng(seed).normal(bias, 10.0, (300, 3))
    r = run_torque(params, tau, dt)
    assert (r["tank"] >= params.t_min - 1e-12).all()
    assert (r["tank"] <= params.t_max + 1e-12).all()
    assert ((r["alpha"] >= 0) & (r["alpha"] <= 1)).all()
    # Energy balance: sum(E) = T_0 - T_k + harvested - overflow, to float64 round-off.
    balance = params.t_init - r["tank"][-1] + r["harvested"].sum() - r["overflow"].sum()
    assert r["injected"].sum() == pytest.approx(balance, abs=1e-9)


@STREAMS
@given(params=params_strategy(), seed=st.integers(0, 2**16))
def test_an_always_pushing_policy_is_throttled_to_the_tank(params: TankParams, seed: int) -> None:
    """Pushing along the motion with ever larger torques injects at most T_0 - T_min + harvested."""
    rng = np.random.default_rng(seed)
    tau = np.abs(rng.normal(50.0, 20.0, (500, 2))) + 1.0
    r = run_torque(params, tau, 1e-2)
    assert r["injected"].sum() <= params.t_init - params.t_min + r["harvested"].sum() + 1e-9
    assert r["alpha"].min() < 1.0  # it did have to throttle


@STREAMS
@given(params=params_strategy(), seed=st.integers(0, 2**16))
def test_alpha_is_one_while_the_tank_suffices(params: TankParams, seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = run_torque(params, rng.normal(0.0, 0.01, (100, 3)), 1e-3)  # tiny torques: tiny predicted energy
    assert (r["alpha"][r["budget"] > 1e-3] == 1.0).all()


@STREAMS
@given(params=params_strategy(), seed=st.integers(0, 2**16), scale=st.floats(0.01, 2.0))
def test_setpoint_jumps_never_overdraw_the_tank(params: TankParams, seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    j, tank = 4, EnergyTank(params, 4)
    k_gain = rng.uniform(1.0, 500.0, j)
    previous, total_in, total_h, total_o = np.zeros(j), 0.0, 0.0, 0.0
    for _ in range(200):
        target = rng.normal(0.0, scale, j)
        r = tank.setpoint(target, previous, rng.normal(0, 0.2, j), rng.normal(0, 1.0, j), k_gain, 1e-3)
        assert params.t_min - 1e-12 <= r.tank <= params.t_max + 1e-12 and 0.0 <= r.alpha <= 1.0
        # The jump actually taken injects exactly what was debited.
        previous, total_in, total_h, total_o = (
            r.command,
            total_in + r.injected,
            total_h + r.harvested,
            total_o + r.overflow,
        )
    assert total_in == pytest.approx(params.t_init - tank.tank + total_h - total_o, abs=1e-9)


def test_without_the_filter_the_same_policy_pumps_energy_without_bound() -> None:
    """The plant of the tests above, unfiltered: kinetic energy grows far past what the tank ever allows."""
    tau = np.full((500, 2), 30.0)
    q, qd = np.zeros(2), np.zeros(2)
    for k in range(len(tau)):
        q, qd = q + qd * 1e-2, qd + (tau[k] - 0.1 * qd) * 1e-2
    params = TankParams(t_init=1.0, t_min=0.1, t_max=2.0)
    filtered = run_torque(params, tau, 1e-2)
    assert 0.5 * float(qd @ qd) > 100 * (params.t_max + filtered["harvested"].sum())


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"t_min": 0.0}, "0 < t_min <= t_init <= t_max"),
        ({"t_init": 9.0}, "0 < t_min <= t_init <= t_max"),
        ({"margin": -1.0}, "margin and filter.damping must be >= 0"),
        ({"t_max": float("nan")}, "filter.t_max must be finite"),
        ({"damping": (float("inf"),)}, "damping must be >= 0"),
    ],
)
def test_bad_tank_parameters_are_named(kw: dict[str, float], match: str) -> None:
    with pytest.raises(ContractError, match=match):
        TankParams(**kw)  # type: ignore[arg-type]


def test_a_non_finite_input_is_refused_and_leaves_the_tank_unchanged() -> None:
    tank = EnergyTank(TankParams(t_init=1.0, t_min=0.1, t_max=2.0), 2)
    tank.torque(np.array([1.0, 1.0]), np.zeros(2), np.ones(2), 0.01)
    before = tank.tank
    with pytest.raises(ContractError, match="'tau' holds a non-finite value"):
        tank.torque(np.array([np.nan, 1.0]), np.zeros(2), np.ones(2), 0.01)
    with pytest.raises(ContractError, match="'stiffness' holds a non-finite value"):
        tank.setpoint(np.ones(2), np.zeros(2), np.zeros(2), np.zeros(2), np.array([1.0, np.inf]), 0.01)
    with pytest.raises(ContractError, match="'q' has 3 values, expected 2"):
        tank.torque(np.ones(2), np.zeros(3), np.ones(2), 0.01)
    with pytest.raises(ContractError, match="dt must be finite and > 0"):
        tank.torque(np.ones(2), np.zeros(2), np.ones(2), float("nan"))
    assert tank.tank == before


@given(
    params=params_strategy(),
    seed=st.integers(0, 2**16),
    hold=st.integers(1, 5),
    dt=st.sampled_from([0.001, 0.004, 0.02]),
)
@settings(max_examples=40, deadline=None)
def test_the_filter_does_not_depend_on_the_policy_rate(params: TankParams, seed: int, hold: int, dt: float) -> None:
    """The filter runs at the control rate: a policy queried every ``hold`` control periods (its command held in
    between) gives exactly the result of the same command stream produced at the control rate."""
    rng = np.random.default_rng(seed)
    slow = rng.normal(0.0, 2.0, (60 // hold + 1, 3))
    expanded = np.repeat(slow, hold, axis=0)[:60]

    def held_policy() -> dict[str, np.ndarray]:
        tank = EnergyTank(params, 3)
        q, qd = np.zeros(3), np.zeros(3)
        tanks, command = [], np.zeros(3)
        for k in range(60):
            if k % hold == 0:  # the policy answers only now; in between the control loop re-sends its command
                command = slow[k // hold]
            r = tank.torque(command, q, qd, dt)
            tanks.append(r.tank)
            q, qd = q + qd * dt, qd + (r.command - 0.1 * qd) * dt
        return {"tank": np.asarray(tanks)}

    np.testing.assert_array_equal(held_policy()["tank"], run_torque(params, expanded, dt)["tank"])
