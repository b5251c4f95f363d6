"""ONNX export: torch parity, the contract in the file, normaliser and scaling in the graph, atomic writes."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from policies.nets import ActorCritic
from policies.nets.export import CONTRACT_YAML, DeployedActor, export_onnx
from policies.runtime import METADATA_KEY, Contract, ContractError, load_contract


def _ort(path: Path, obs: np.ndarray, contract: Contract) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run([contract.output_name], {contract.input_name: obs.astype(np.float32)})
    return np.asarray(out)


def _torch(model: ActorCritic, contract: Contract, obs: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return DeployedActor(model, contract).eval()(obs).numpy()


def test_deployed_actor_is_clip_scale_clip_of_the_actor_mean(
    model: ActorCritic, contract: Contract, sample_obs: Callable[..., torch.Tensor]
) -> None:
    obs = sample_obs(contract.obs_dim, 256)
    a = contract.action
    with torch.no_grad():
        mean = model.actor(model.actor_normalizer(obs))
    expected = (torch.tensor(a.offset) + torch.tensor(a.scale) * mean.clamp(-1, 1)).clamp(
        torch.tensor(a.low), torch.tensor(a.high)
    )
    torch.testing.assert_close(torch.from_numpy(_torch(model, contract, obs)), expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("kind", ["torque", "rpm"])
def test_onnx_matches_torch_within_1e_5(
    kind: str,
    tmp_path: Path,
    build_contract: Callable[..., Contract],
    build_model: Callable[..., ActorCritic],
    sample_obs: Callable[..., torch.Tensor],
) -> None:
    contract = build_contract(kind)
    model = build_model(contract.obs_dim)
    obs = sample_obs(contract.obs_dim, 1000)
    expected = _torch(model, contract, obs)
    got = _ort(export_onnx(model, contract, tmp_path), obs.numpy(), contract)

    assert got.shape == (1000, contract.action.size) and got.dtype == np.float32
    low, high = np.float32(contract.action.low), np.float32(contract.action.high)
    assert ((got >= low) & (got <= high)).all()
    # The test is only worth something if both clips and the linear part are exercised.
    assert (got == low).any() and (got == high).any() and ((got > low) & (got < high)).mean() > 0.2
    with torch.no_grad():
        assert (model.action_mean(obs).abs() > 1).any()
    # Commands of ~1e4 RPM carry float32 steps of ~1e-3 RPM, so compare in normalised units (command / scale).
    err = np.abs(got - expected) / (np.asarray(contract.action.scale) if kind == "rpm" else 1.0)
    assert err.max() <= 1e-5, f"max |onnx - torch| = {err.max():.3g} ({kind})"


def test_contract_round_trips_through_metadata_and_yaml(exported: Path, contract: Contract) -> None:
    assert load_contract(exported) == contract
    assert Contract.load_yaml(exported.parent / CONTRACT_YAML) == contract

    onnx.checker.check_model(str(exported), full_check=True)
    proto = onnx.load(str(exported))
    assert proto.producer_name == "robot-rl"
    assert {p.key: p.value for p in proto.metadata_props} == {METADATA_KEY: contract.to_json()}
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]
    (inp,), (out,) = proto.graph.input, proto.graph.output
    assert (inp.name, out.name) == (contract.input_name, contract.output_name)
    assert [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim] == ["batch", contract.obs_dim]
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == [
        "batch",
        contract.action.size,
    ]


def test_normaliser_and_action_scaling_live_in_the_graph(
    tmp_path: Path, model: ActorCritic, contract: Contract, sample_obs: Callable[..., torch.Tensor]
) -> None:
    obs = sample_obs(contract.obs_dim, 200).numpy()
    base = _ort(export_onnx(model, contract, tmp_path / "base"), obs, contract)

    shifted = copy.deepcopy(model)
    with torch.no_grad():
        shifted.actor_normalizer.mean += 0.5
        shifted.actor_normalizer.var *= 4.0
    renorm = _ort(export_onnx(shifted, contract, tmp_path / "norm"), obs, contract)
    np.testing.assert_allclose(renorm, _torch(shifted, contract, torch.from_numpy(obs)), rtol=0, atol=1e-5)
    assert np.abs(renorm - base).max() > 0.1

    action = dataclasses.replace(contract.action, offset=[0.0] * 4, scale=[0.1] * 4)
    rescaled_contract = dataclasses.replace(contract, action=action)
    rescaled = _ort(export_onnx(model, rescaled_contract, tmp_path / "scale"), obs, contract)
    assert np.abs(rescaled).max() <= 0.1 + 1e-6 and np.abs(rescaled - base).max() > 0.1


def test_export_does_not_touch_the_training_model(tmp_path: Path, contract: Contract, build_model: Callable) -> None:
    model = build_model(contract.obs_dim).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_onnx(model, contract, tmp_path)
    assert model.training and all(p.requires_grad for p in model.parameters())
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_export_refuses_a_contract_that_does_not_fit_the_model(
    tmp_path: Path, model: ActorCritic, contract: Contract, build_model: Callable
) -> None:
    with pytest.raises(ContractError, match=rf"obs_dim is {contract.obs_dim} .* actor takes {contract.obs_dim + 3}"):
        export_onnx(build_model(contract.obs_dim + 3), contract, tmp_path)
    action = dataclasses.replace(contract.action, size=3, names=["a", "b", "c"], scale=[1.0] * 3, offset=[0.0] * 3)
    action = dataclasses.replace(action, low=[-1.0] * 3, high=[1.0] * 3)
    with pytest.raises(ContractError, match=r"action.size is 3, but the actor has 4 actions"):
        export_onnx(model, dataclasses.replace(contract, action=action), tmp_path)
    assert list(tmp_path.iterdir()) == []


def _prior_export(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.onnx").write_bytes(b"previous policy")
    (folder / CONTRACT_YAML).write_text("previous: contract\n")


def _assert_prior_export_intact(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == [CONTRACT_YAML, "policy.onnx"]  # no temp files
    assert (folder / "policy.onnx").read_bytes() == b"previous policy"
    assert (folder / CONTRACT_YAML).read_text() == "previous: contract\n"


def test_failed_check_leaves_previous_export_intact(
    tmp_path: Path, model: ActorCritic, contract: Contract, monkeypatch: pytest.MonkeyPatch
) -> None:
    _prior_export(tmp_path)

    def broken_check(*args: object, **kwargs: object) -> None:
        raise onnx.checker.ValidationError("checker says no")

    monkeypatch.setattr(onnx.checker, "check_model", broken_check)
    with pytest.raises(onnx.checker.ValidationError, match="checker says no"):
        export_onnx(model, contract, tmp_path)
    _assert_prior_export_intact(tmp_path)


def test_failure_while_writing_leaves_previous_export_intact(
    tmp_path: Path, model: ActorCritic, contract: Contract, monkeypatch: pytest.MonkeyPatch
) -> None:
    _prior_export(tmp_path)

    def half_write(self: Contract, path: Path) -> None:
        Path(path).write_text("task: half-writ")
        raise OSError("disk full")

    monkeypatch.setattr(Contract, "save_yaml", half_write)
    with pytest.raises(OSError, match="disk full"):
        export_onnx(model, contract, tmp_path)
    _assert_prior_export_intact(tmp_path)


def test_export_replaces_previous_export(tmp_path: Path, model: ActorCritic, contract: Contract) -> None:
    _prior_export(tmp_path)
    path = export_onnx(model, contract, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONTRACT_YAML, "policy.onnx"]
    assert load_contract(path) == contract == Contract.load_yaml(tmp_path / CONTRACT_YAML)
