"""Robot-side runner: signals -> commands from the contract, torch-free import, clear errors on bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.nets import ActorCritic
from policies.nets.export import DeployedActor
from policies.runtime import METADATA_KEY, Contract, ContractError, OnnxPolicy, PolicyFileError, load_contract

REPO = Path(__file__).resolve().parents[2]
EditOnnx = Callable[[Path, dict[str, str]], Path]


def _signals(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "ang_vel": rng.normal(0.0, 2.0, (n, 3)).astype(np.float32),
        "joint_pos": rng.normal(0.0, 1.0, (n, 4)).astype(np.float32),
        "last_action": rng.uniform(-1.0, 1.0, (n, 4)).astype(np.float32),
    }


def test_signals_to_commands_match_torch(exported: Path, model: ActorCritic, contract: Contract) -> None:
    policy = OnnxPolicy(exported, num_envs=3)
    assert (policy.obs_dim, policy.num_actions, policy.contract) == (contract.obs_dim, 4, contract)
    for step in range(4):
        signals = _signals(3, seed=step)
        obs = policy.observation(signals)
        command = policy.run_obs(obs)
        with torch.no_grad():
            expected = DeployedActor(model, contract).eval()(torch.from_numpy(obs)).numpy()
        np.testing.assert_allclose(command, expected, rtol=0, atol=1e-5)
    policy.reset()
    command = policy(_signals(3, seed=9))
    assert command.shape == (3, 4) and command.dtype == np.float32
    assert ((command >= np.float32(contract.action.low)) & (command <= np.float32(contract.action.high))).all()


def test_observation_follows_the_contract_layout(exported: Path) -> None:
    policy = OnnxPolicy(exported, num_envs=2)
    s0, s1, s2 = _signals(2, 0), _signals(2, 1), _signals(2, 2)
    first = policy.observation(s0)  # fresh: history filled with the first sample
    np.testing.assert_allclose(first[:, :6], np.concatenate([s0["ang_vel"], s0["ang_vel"]], 1) * 0.25)
    second = policy.observation(s1)  # newest first
    np.testing.assert_allclose(second[:, :6], np.concatenate([s1["ang_vel"], s0["ang_vel"]], 1) * 0.25)
    np.testing.assert_allclose(second[:, 6:18], np.concatenate([s1["joint_pos"], s0["joint_pos"], s0["joint_pos"]], 1))
    np.testing.assert_allclose(second[:, 18:], s1["last_action"])
    policy.reset(np.array([True, False]))
    third = policy.observation(s2)
    np.testing.assert_allclose(third[0, 6:18], np.tile(s2["joint_pos"][0], 3))
    np.testing.assert_allclose(
        third[1, 6:18], np.concatenate([s2["joint_pos"][1], s1["joint_pos"][1], s0["joint_pos"][1]])
    )


def test_normalized_action_inverts_the_scaling(exported: Path, contract: Contract) -> None:
    policy = OnnxPolicy(exported)
    a = np.array([[-0.5, 0.0, 0.25, 0.9]], dtype=np.float32)
    command = np.asarray(contract.action.offset) + np.asarray(contract.action.scale) * a
    np.testing.assert_allclose(policy.normalized_action(command), a, atol=1e-6)
    far = np.array([[1e3, -1e3, 1e3, -1e3]], dtype=np.float32)
    np.testing.assert_array_equal(policy.normalized_action(far), [[1.0, -1.0, 1.0, -1.0]])
    command = policy(_signals(1))
    feedback = policy.normalized_action(command)
    assert feedback.shape == (1, 4) and np.abs(feedback).max() <= 1.0
    policy({**_signals(1, 1), "last_action": feedback})  # a robot loop feeds it back as the next last_action


def test_self_test_passes_and_leaves_the_history_alone(exported: Path, contract: Contract) -> None:
    policy = OnnxPolicy(exported, num_envs=2)
    command = policy.self_test()
    assert command.shape == (2, 4) and np.isfinite(command).all()
    first = policy.observation(_signals(2, 0))
    np.testing.assert_allclose(first[:, :3], first[:, 3:6])  # still fresh after the self-test


_TORCH_FREE = """
import importlib.abc, json, sys

class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked: the robot runtime must not need torch")
        return None

sys.meta_path.insert(0, BlockTorch())
import numpy as np
import policies.runtime as rt

for heavy in ("torch", "yaml", "onnx", "sim", "mujoco", "robot_rl", "policies.nets"):
    assert heavy not in sys.modules, heavy
policy = rt.OnnxPolicy(sys.argv[1])
policy.self_test()
signals = json.loads(sys.argv[2])
command = policy({k: np.asarray(v, dtype=np.float32) for k, v in signals.items()})
assert "torch" not in sys.modules
try:
    import torch
except ImportError:
    pass
else:
    raise AssertionError("torch import was not blocked")
print(json.dumps(command.tolist()))
"""


def test_runtime_runs_without_torch(exported: Path) -> None:
    signals = _signals(1, seed=3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _TORCH_FREE,
            str(exported),
            json.dumps({k: v.tolist() for k, v in signals.items()}),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(json.loads(result.stdout), OnnxPolicy(exported)(signals), rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------- bad input
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"policy file not found: .*nope\.onnx"):
        load_contract(tmp_path / "nope.onnx")
    with pytest.raises(FileNotFoundError, match="policy file not found"):
        OnnxPolicy(tmp_path / "nope.onnx")


def test_not_an_onnx_file(tmp_path: Path) -> None:
    bogus = tmp_path / "policy.onnx"
    bogus.write_text("definitely not protobuf")
    with pytest.raises(PolicyFileError, match=r"policy\.onnx is not a valid ONNX model"):
        OnnxPolicy(bogus)
    with pytest.raises(PolicyFileError, match="not a file"):
        load_contract(tmp_path)


def test_onnx_without_contract(exported: Path, write_onnx_with_metadata: EditOnnx) -> None:
    bare = write_onnx_with_metadata(exported, {"author": "someone"})
    with pytest.raises(ContractError, match=rf"no deployment contract \(metadata key '{METADATA_KEY}' missing"):
        load_contract(bare)
    with pytest.raises(ContractError, match="keys present: \\['author'\\]"):
        OnnxPolicy(bare)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "malformed deployment contract: contract is not valid JSON"),
        ('{"task": "x", "colour": 1}', r"unknown contract key\(s\) \['colour'\]"),
        ('{"task": "x"}', "malformed deployment contract: malformed contract: missing key 'observation'"),
        ('{"task": "x", "control_period_s": 0.1, "observation": 3, "action": {}}', "malformed contract"),
    ],
)
def test_malformed_contract(exported: Path, write_onnx_with_metadata: EditOnnx, text: str, match: str) -> None:
    with pytest.raises(ContractError, match=match):
        load_contract(write_onnx_with_metadata(exported, {METADATA_KEY: text}))


def _with_contract(exported: Path, edit: EditOnnx, contract: Contract) -> Path:
    return edit(exported, {METADATA_KEY: contract.to_json()})


def test_contract_that_does_not_match_the_graph(
    exported: Path, contract: Contract, write_onnx_with_metadata: EditOnnx
) -> None:
    longer = dataclasses.replace(contract.observation[0], history=3)
    wrong_obs = dataclasses.replace(contract, observation=[longer, *contract.observation[1:]])
    with pytest.raises(ContractError, match=r"input 'obs' has width 22, but the contract obs_dim is 25"):
        OnnxPolicy(_with_contract(exported, write_onnx_with_metadata, wrong_obs))

    action = dataclasses.replace(contract.action, size=3, names=["a", "b", "c"], scale=[1.0] * 3, offset=[0.0] * 3)
    wrong_act = dataclasses.replace(contract, action=dataclasses.replace(action, low=[-1.0] * 3, high=[1.0] * 3))
    with pytest.raises(ContractError, match=r"output 'action' has width 4, but the contract action.size is 3"):
        OnnxPolicy(_with_contract(exported, write_onnx_with_metadata, wrong_act))

    renamed = dataclasses.replace(contract, input_name="observation")
    with pytest.raises(
        ContractError, match=r"model inputs are \['obs'\], contract expects exactly one named 'observation'"
    ):
        OnnxPolicy(_with_contract(exported, write_onnx_with_metadata, renamed))


def test_bad_signals_and_inputs(exported: Path) -> None:
    policy = OnnxPolicy(exported, num_envs=2)
    signals = _signals(2)
    del signals["joint_pos"]
    with pytest.raises(ContractError, match=r"term 'joint_pos' needs signal 'joint_pos', which was not provided"):
        policy(signals)
    with pytest.raises(ContractError, match=r"signal 'ang_vel' has shape \(1, 3\), .* expects \(2, 3\)"):
        policy({**_signals(2), "ang_vel": np.zeros((1, 3))})
    with pytest.raises(ContractError, match=r"must have shape \[B, 22\] \(obs_dim\), got \(2, 21\)"):
        policy.run_obs(np.zeros((2, 21)))
    with pytest.raises(ContractError, match=r"got \(22,\)"):
        policy.run_obs(np.zeros(22))
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        OnnxPolicy(exported, num_envs=0)
