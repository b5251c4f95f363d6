"""Integral observation terms: one definition for the simulator (torch), the robot (numpy) and the contract."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.runtime.contract import ActionSpec, Contract, ContractError, ObservationTerm
from policies.runtime.inspect import describe
from policies.runtime.observation import ObservationBuilder

DT = 0.02
TERMS = [
    ObservationTerm("position", 3, "pos_w", unit="m"),
    ObservationTerm("position_integral", 3, "pos_w", scale=2.0, history=2, unit="m", integral_limit=0.05),
]


def test_integral_accumulates_clips_and_restarts_with_the_episode() -> None:
    b = ObservationBuilder(TERMS, 2, xp=np, dt=DT)
    x = np.array([[1.0, -1.0, 0.1], [0.0, 0.5, 0.0]], dtype=np.float32)
    obs = b({"pos_w": x})
    np.testing.assert_allclose(obs[:, 3:6], 2.0 * DT * x, rtol=1e-6)  # first sample: dt * x
    np.testing.assert_allclose(obs[:, 6:9], obs[:, 3:6])  # fresh history filled with it
    for _ in range(10):
        obs = b({"pos_w": x})
    expected = np.clip(11 * DT * x, -0.05, 0.05)
    np.testing.assert_allclose(b.integral("position_integral"), expected, rtol=1e-5)
    np.testing.assert_allclose(obs[:, 3:6], 2.0 * expected, rtol=1e-5)
    b.reset(np.array([True, False]))  # world 0 starts a new episode: its integral restarts from zero
    obs = b({"pos_w": x})
    np.testing.assert_allclose(obs[0, 3:6], 2.0 * DT * x[0], rtol=1e-6)
    np.testing.assert_allclose(obs[1, 3:6], 2.0 * np.clip(12 * DT * x[1], -0.05, 0.05), rtol=1e-5)


def test_a_band_integrates_only_the_samples_within_it() -> None:
    """Conditional integration: an element adds ``dt * x`` only while ``|x| < band``, so the approach from far away
    does not wind the integral up (the start of an episode is 0.3 m off here; the band is 0.1 m)."""
    term = ObservationTerm("position_integral", 3, "pos_w", unit="m", integral_limit=0.5, integral_band=0.1)
    b = ObservationBuilder([term], 1, xp=np, dt=DT)
    far = np.array([[0.3, -0.3, 0.05]], dtype=np.float32)
    for _ in range(5):
        b({"pos_w": far})
    np.testing.assert_allclose(b.integral("position_integral"), [[0.0, 0.0, 5 * DT * 0.05]], rtol=1e-6)
    near = np.array([[0.02, -0.0999, 0.1]], dtype=np.float32)  # 0.1 is on the band's edge: outside
    b({"pos_w": near})
    np.testing.assert_allclose(b.integral("position_integral"), [[DT * 0.02, -DT * 0.0999, 5 * DT * 0.05]], rtol=1e-6)


@pytest.mark.parametrize("band", [0.0, 1.0], ids=["no-band", "band"])
def test_torch_and_numpy_builders_agree_and_state_round_trips(band: float) -> None:
    rng = np.random.default_rng(0)
    terms = [TERMS[0], dataclasses.replace(TERMS[1], integral_band=band)]
    bn = ObservationBuilder(terms, 3, xp=np, dt=DT)
    bt = ObservationBuilder(terms, 3, xp=torch, device=torch.device("cpu"), dt=DT)
    saved = None
    for k in range(20):
        x = rng.normal(0, 1, (3, 3)).astype(np.float32)
        if k == 7:
            mask = np.array([False, True, False])
            bn.reset(mask)
            bt.reset(torch.from_numpy(mask))
        if k == 10:
            saved = bn.state_dict()
        on, ot = bn({"pos_w": x}), bt({"pos_w": torch.from_numpy(x)})
        np.testing.assert_allclose(on, ot.numpy(), rtol=1e-6, atol=1e-7)
    assert saved is not None
    b2 = ObservationBuilder(terms, 3, xp=np, dt=DT)
    b2.load_state_dict(saved)
    assert "integral.position_integral" in saved


def test_integral_terms_need_a_control_period_and_numbers_finite_in_float32() -> None:
    with pytest.raises(ContractError, match=r"position_integral.*control period"):
        ObservationBuilder(TERMS, 1, xp=np)
    action = ActionSpec(1, ["a"], "normalized", [1.0], [0.0], [-1.0], [1.0])
    bad = ObservationTerm("i", 1, "s", integral_limit=-1.0)
    with pytest.raises(ContractError, match="'i': integral_limit must be >= 0"):
        Contract("t", DT, [bad], action, input_name="x", output_name="y")
    nan = ObservationTerm("i", 1, "s", integral_limit=float("nan"))
    with pytest.raises(ContractError, match="integral_limit"):
        Contract("t", DT, [nan], action, input_name="x", output_name="y")
    bands: dict[object, str] = {
        -0.1: "'i': integral_band must be >= 0",
        float("inf"): "'i': integral_band must be finite, got inf",
        1e39: "'i': integral_band must be finite in float32 (|x| <= 3.403e+38), got 1e+39",
        "0.1": "'i': integral_band must be a number, got str",
    }
    for band, message in bands.items():
        term = ObservationTerm("i", 1, "s", integral_limit=1.0, integral_band=band)  # type: ignore[arg-type]
        with pytest.raises(ContractError, match=re.escape(message)):
            Contract("t", DT, [term], action)
    with pytest.raises(ContractError, match=re.escape("'i': integral_band 0.1 needs integral_limit > 0")):
        Contract("t", DT, [ObservationTerm("i", 1, "s", integral_band=0.1)], action)
    with pytest.raises(ContractError, match=re.escape("'i': integral_limit must be finite in float32")):
        Contract("t", DT, [ObservationTerm("i", 1, "s", integral_limit=1e39)], action)
    with pytest.raises(ContractError, match=re.escape("'i': scale must be finite in float32")):  # was C's `inf.0f`
        Contract("t", DT, [ObservationTerm("i", 1, "s", scale=-1e39)], action)


def test_contract_round_trips_the_integral_and_old_contracts_still_load() -> None:
    action = ActionSpec(4, list("abcd"), "rpm", [1.0] * 4, [0.0] * 4, [0.0] * 4, [9.0] * 4)
    c = Contract("t", DT, TERMS, action, input_name="x", output_name="y")
    banded = Contract("t", DT, [TERMS[0], dataclasses.replace(TERMS[1], integral_band=0.1)], action)
    back = Contract.from_json(banded.to_json())
    assert (back.observation[1].integral_limit, back.observation[1].integral_band) == (0.05, 0.1)
    assert "(dt = control period, clipped to +-0.05, only while within +-0.1 m) m s, scale 2" in describe(banded)
    old = c.to_dict()
    for term in old["observation"]:
        del term["integral_limit"], term["integral_band"]  # contracts written before integral terms existed
    assert Contract.from_dict(old).observation[1].integral_limit == 0.0
    assert Contract.from_dict(old).observation[1].integral_band == 0.0


def test_latest_sample_is_unscaled_and_names_are_checked() -> None:
    b = ObservationBuilder(TERMS, 2, xp=np, dt=DT)
    x = np.array([[1.0, -1.0, 0.1], [0.0, 0.5, 0.0]], dtype=np.float32)
    b({"pos_w": x})
    b({"pos_w": 2 * x})
    np.testing.assert_allclose(b.latest("position"), 2 * x)
    np.testing.assert_allclose(b.latest("position_integral"), b.integral("position_integral"), rtol=1e-6)
    with pytest.raises(ContractError, match=r"no observation term 'velocity'.*position_integral"):
        b.latest("velocity")


def test_a_policy_queried_at_another_period_integrates_over_that_period(tmp_path: Path) -> None:
    """A robot running the policy at 250 Hz (``control_period_s=0.004``) builds the same integral over the same
    time as one at the contract's 50 Hz; with the contract's period the integral would grow 5x too fast."""
    from policies.nets import ActorCritic
    from policies.nets.export import export_onnx
    from policies.runtime import OnnxPolicy

    action = ActionSpec(2, ["a", "b"], "torque", [1.0, 1.0], [0.0, 0.0], [-1.0, -1.0], [1.0, 1.0], unit="N m")
    contract = Contract("t", DT, TERMS, action, joint_names=["a", "b"], default_pose=[0.0, 0.0])
    torch.manual_seed(0)
    path = export_onnx(ActorCritic(contract.obs_dim, 4, 2, actor_hidden=(8,), critic_hidden=(8,)), contract, tmp_path)
    x = np.array([[0.1, -0.2, 0.3]], dtype=np.float32)
    slow, fast = OnnxPolicy(path), OnnxPolicy(path, control_period_s=DT / 5)
    assert (slow.control_period_s, fast.control_period_s) == (DT, DT / 5)
    for _ in range(4):
        a = slow.observation({"pos_w": x})
    for _ in range(20):
        b = fast.observation({"pos_w": x})
    np.testing.assert_allclose(a[:, 3:6], 2.0 * 4 * DT * x, rtol=1e-5)  # 0.08 s of the signal, scaled by 2
    np.testing.assert_allclose(b[:, 3:6], a[:, 3:6], rtol=1e-5)
    for bad in (0.0, -0.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="control_period_s must be a positive number of seconds"):
            OnnxPolicy(path, control_period_s=bad)
    with pytest.raises(ValueError, match=r"control_period_s must be >= 0.0001 s \(10 kHz\), got 1e-06"):
        OnnxPolicy(path, control_period_s=1e-6)  # 1 MHz: refused where every deployment opens the policy
    assert OnnxPolicy(path, control_period_s=1e-4).control_period_s == 1e-4  # exactly 10 kHz is allowed
