"""Property-based fuzzing of the robot-side runtime: every malformed signal or contract field is refused by name,
and no non-finite or out-of-range command ever leaves :class:`OnnxPolicy`."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.runtime import METADATA_KEY, Contract, ContractError, OnnxPolicy
from policies.runtime.onnx_policy import UnsafeCommandError

EditOnnx = Callable[[Path, dict[str, str]], Path]
SOURCES = {"ang_vel": 3, "joint_pos": 4, "last_action": 4}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])


def _signals(n: int, rng: np.random.Generator, magnitude: float = 1.0) -> dict[str, np.ndarray]:
    return {k: (magnitude * rng.standard_normal((n, size))).astype(np.float32) for k, size in SOURCES.items()}


@pytest.fixture(scope="module")
def policy(exported: Path) -> OnnxPolicy:
    return OnnxPolicy(exported, num_envs=2)


# ---------------------------------------------------------------------------------------------- signals
@FUZZ
@given(
    source=st.sampled_from(sorted(SOURCES)),
    bad=NON_FINITE,
    row=st.integers(0, 1),
    col=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_a_non_finite_signal_is_refused_by_name_and_leaves_the_history_alone(
    policy: OnnxPolicy, source: str, bad: float, row: int, col: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    policy.reset()
    policy(_signals(2, rng))
    before = policy._builder.read().copy()
    signals = _signals(2, rng)
    signals[source][row, col % SOURCES[source]] = bad
    with pytest.raises(ContractError, match=rf"signal '{source}'.*non-finite"):
        policy(signals)
    np.testing.assert_array_equal(policy._builder.read(), before)


@FUZZ
@given(
    source=st.sampled_from(sorted(SOURCES)),
    value=st.sampled_from(
        [
            np.zeros((2, 4), dtype=bool),
            np.zeros((2, 4), dtype=np.complex64),
            np.array([[object()] * 4] * 2, dtype=object),
            np.array([["a"] * 4] * 2),
            "not an array",
            None,
        ]
    ),
)
def test_wrong_dtypes_are_refused_by_name(policy: OnnxPolicy, source: str, value: Any) -> None:
    signals = _signals(2, np.random.default_rng(0))
    signals[source] = value[:, : SOURCES[source]] if isinstance(value, np.ndarray) else value
    with pytest.raises(ContractError, match=rf"signal '{source}' has dtype"):
        policy(signals)


@FUZZ
@given(
    source=st.sampled_from(sorted(SOURCES)),
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple),
)
def test_wrong_shapes_are_refused_by_name(policy: OnnxPolicy, source: str, shape: tuple[int, ...]) -> None:
    if shape == (2, SOURCES[source]):
        return
    signals = _signals(2, np.random.default_rng(0))
    signals[source] = np.zeros(shape, dtype=np.float32)
    with pytest.raises(ContractError, match=rf"signal '{source}' has shape"):
        policy(signals)


@FUZZ
@given(seed=st.integers(0, 2**16), magnitude=st.sampled_from([1e-30, 1.0, 1e3, 1e20, 1e37, 1e39]))
def test_commands_are_finite_and_within_limits_or_refused(policy: OnnxPolicy, seed: int, magnitude: float) -> None:
    policy.reset()
    rng = np.random.default_rng(seed)
    for _ in range(3):
        signals = {k: magnitude * rng.standard_normal((2, size)) for k, size in SOURCES.items()}  # float64
        try:
            command = policy(signals)
        except ContractError as exc:
            assert "non-finite" in str(exc) and magnitude > 1e37  # beyond float32 after the cast
            continue
        assert np.isfinite(command).all()
        assert (command >= policy._low).all() and (command <= policy._high).all()


def test_a_nan_last_action_does_not_poison_later_commands(exported: Path) -> None:
    clean, poked = OnnxPolicy(exported, num_envs=2), OnnxPolicy(exported, num_envs=2)
    rng = np.random.default_rng(3)
    first = _signals(2, rng)
    for p in (clean, poked):
        p(first)
    bad = _signals(2, rng)
    bad["last_action"][0, 0] = math.nan
    with pytest.raises(ContractError, match="signal 'last_action'"):
        poked(bad)
    for _ in range(5):
        signals = _signals(2, rng)
        np.testing.assert_array_equal(poked(signals), clean(signals))


def test_non_finite_policy_input_and_commands_are_refused(policy: OnnxPolicy) -> None:
    x = np.zeros((1, policy.obs_dim), dtype=np.float32)
    x[0, 5] = math.nan
    with pytest.raises(ContractError, match=r"policy input holds a non-finite value at index \(0, 5\)"):
        policy.run_obs(x)
    with pytest.raises(ContractError, match="policy input has dtype bool"):
        policy.run_obs(np.zeros((1, policy.obs_dim), dtype=bool))
    with pytest.raises(ContractError, match="command holds a non-finite value"):
        policy.normalized_action(np.full((1, 4), math.inf))
    with pytest.raises(ContractError, match=r"command must have shape \[\.\.\., 4\]"):
        policy.normalized_action(np.zeros((1, 3)))


def test_a_graph_that_emits_nan_is_never_passed_on(policy: OnnxPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even if the graph itself misbehaves (NaN weights, a bad build), the runtime raises instead of returning."""
    monkeypatch.setattr(policy, "_run", lambda x: np.full((x.shape[0], 4), math.nan, dtype=np.float32))
    with pytest.raises(UnsafeCommandError, match="non-finite command for 'm0'; nothing was sent"):
        policy.run_obs(np.zeros((1, policy.obs_dim), dtype=np.float32))
    monkeypatch.setattr(policy, "_run", lambda x: np.full((x.shape[0], 4), 1e3, dtype=np.float32))
    with pytest.raises(UnsafeCommandError, match=r"outside the contract's \[-1, 1\]"):
        policy.run_obs(np.zeros((1, policy.obs_dim), dtype=np.float32))
    with pytest.raises(RuntimeError, match="self-test failed"):
        policy.self_test()


# --------------------------------------------------------------------------------------- contract fields
BAD_NUMBERS = st.one_of(NON_FINITE, st.just(True), st.just("1.0"), st.just(None), st.just([1.0]))
FIELD_EDITS: list[tuple[str, Callable[[dict[str, Any], Any], None], Any]] = [
    ("control_period_s", lambda d, v: d.__setitem__("control_period_s", v), BAD_NUMBERS),
    ("action.scale", lambda d, v: d["action"]["scale"].__setitem__(1, v), BAD_NUMBERS),
    ("action.offset", lambda d, v: d["action"]["offset"].__setitem__(2, v), BAD_NUMBERS),
    ("action.low", lambda d, v: d["action"]["low"].__setitem__(0, v), BAD_NUMBERS),
    ("action.high", lambda d, v: d["action"]["high"].__setitem__(3, v), BAD_NUMBERS),
    ("observation term 'base_ang_vel': scale", lambda d, v: d["observation"][0].__setitem__("scale", v), BAD_NUMBERS),
    ("default_pose", lambda d, v: d["default_pose"].__setitem__(0, v), BAD_NUMBERS),
    ("filter.tank_init_j", lambda d, v: d["filter"].__setitem__("tank_init_j", v), NON_FINITE),
    ("extra.note", lambda d, v: d["extra"].__setitem__("note", v), NON_FINITE),
]


@FUZZ
@given(data=st.data(), which=st.integers(0, len(FIELD_EDITS) - 1))
def test_every_malformed_number_is_refused_by_name(contract: Contract, data: st.DataObject, which: int) -> None:
    name, edit, values = FIELD_EDITS[which]
    d = copy.deepcopy(contract.to_dict())
    edit(d, data.draw(values))
    with pytest.raises(ContractError, match=name.replace("(", r"\(").split(":")[0].replace(".", r"\.")):
        Contract.from_dict(d)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d["action"]["scale"].__setitem__(0, -1.5), "action.scale of 'm0' must be positive"),
        (lambda d: d["action"]["scale"].__setitem__(0, 0.0), "action.scale of 'm0' must be positive"),
        (lambda d: d["action"].update(low=[2.0] * 4), r"action.low of 'm0' \(2.0\) exceeds action.high"),
        (lambda d: d["action"]["offset"].__setitem__(1, 5.0), r"action.offset of 'm1' \(5.0\) lies outside"),
        (lambda d: d["observation"][0].update(scale=0.0), "scale must be non-zero"),
        (lambda d: d["observation"][0].update(size=0), r"size must be an integer in \[1,"),
        (lambda d: d["observation"][0].update(size=2.5), r"size must be an integer in \[1,"),
        (lambda d: d["observation"][0].update(size=True), r"size must be an integer in \[1,"),
        (lambda d: d["observation"][1].update(history=10**6), r"history must be an integer in \[1, 1000\]"),
        (lambda d: d["observation"][1].update(source=""), "source must be a non-empty string"),
        (lambda d: d.update(observation=[]), "observation must be a non-empty list"),
        (lambda d: d["action"].update(size=-1), r"action.size must be an integer"),
        (lambda d: d["action"]["names"].__setitem__(1, "m0"), "action.names must be unique"),
        (lambda d: d.update(control_period_s=0), "control_period_s must be positive"),
        (lambda d: d.update(version=True), "contract version True is not supported"),
        (lambda d: d.update(normalization="outside"), "normalization 'outside' is not one of"),
        (lambda d: d.update(default_pose=[0.0]), "default_pose has 1 entries, joint_names has 4"),
        (lambda d: d.update(filter=[1]), "filter must be a mapping"),
        (lambda d: d.update(filter={"trained_with_tank_j": "40"}), "filter.trained_with_tank_j must be a number"),
        (lambda d: d.update(filter={"trained_with_tank_j": True}), "filter.trained_with_tank_j must be a number"),
        (lambda d: d.update(filter={"trained_with_tank_j": -1.0}), "filter.trained_with_tank_j must be > 0 J"),
    ],
)
def test_malformed_contract_values_are_named(contract: Contract, edit: Callable[[dict[str, Any]], None], match: str):
    d = copy.deepcopy(contract.to_dict())
    edit(d)
    with pytest.raises(ContractError, match=match):
        Contract.from_dict(d)


def test_a_contract_whose_mapping_the_graph_contradicts_is_refused(
    exported: Path, contract: Contract, write_onnx_with_metadata: EditOnnx
) -> None:
    def load(c: Contract) -> OnnxPolicy:
        return OnnxPolicy(write_onnx_with_metadata(exported, {METADATA_KEY: c.to_json()}))

    a = contract.action
    halved = dataclasses.replace(contract, action=dataclasses.replace(a, scale=[s / 2 for s in a.scale]))
    with pytest.raises(ContractError, match=r"action mapping \(offset .*\) does not explain the graph's command"):
        load(halved)
    shifted = dataclasses.replace(contract, action=dataclasses.replace(a, offset=[0.0, 0.0, -0.5, 0.0]))
    with pytest.raises(ContractError, match="does not explain the graph's command"):
        load(shifted)
    narrower = dataclasses.replace(contract, action=dataclasses.replace(a, high=[0.5, 0.4, 1.0, 1.0]))
    with pytest.raises(ContractError, match="does not honour the contract's action limits"):
        load(narrower)
    load(contract).self_test()  # the true contract passes
