"""Action-chunk policies: the denoiser learns, the exported sampler matches the library's, the runtime executes
chunks as documented, and the robot side needs no torch."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from policies.nets.bc_mlp import MLPChunkPolicy
from policies.nets.chunk import ChunkPolicy, Horizons
from policies.nets.diffusion import DiffusionPolicy, SamplerSettings
from policies.nets.diffusion.fixed_step import ExportMish
from policies.nets.export import chunk_to_onnx_model, write_onnx
from policies.runtime.chunking import ChunkedOnnxPolicy, ChunkExecutor
from policies.runtime.contract import ChunkSpec, Contract, ContractError
from policies.runtime.onnx_policy import OnnxPolicy
from robot_rl.imitation.students import DiffusionStudentConfig, student_config
from tests.policies.conftest import NUM_ACTIONS, make_contract

REPO = Path(__file__).resolve().parents[2]
H = Horizons(obs=2, pred=8, action=4)


def _policy(kind: str, steps: int = 5) -> ChunkPolicy:
    torch.manual_seed(0)
    obs_dim = make_contract().obs_dim
    lo, hi = -np.ones(obs_dim) * 2, np.ones(obs_dim) * 3
    alo, ahi = -np.ones(NUM_ACTIONS) * 0.8, np.ones(NUM_ACTIONS) * 0.9
    if kind == "mlp":
        return MLPChunkPolicy(obs_dim, NUM_ACTIONS, H, lo, hi, alo, ahi, hidden=(32, 32))
    sampler = SamplerSettings(train_steps=50, inference_steps=steps)
    return DiffusionPolicy(
        obs_dim,
        NUM_ACTIONS,
        H,
        lo,
        hi,
        alo,
        ahi,
        denoiser=kind,
        down_dims=(16, 32),
        d_model=32,
        layers=2,
        sampler=sampler,
    )


def _chunk_contract(policy: ChunkPolicy, ensemble: float | None = None) -> Contract:
    noise = "noise" if isinstance(policy, DiffusionPolicy) else ""
    spec = ChunkSpec(H.obs, H.pred, H.action, noise, policy.sampler_settings(), ensemble)
    return dataclasses.replace(make_contract(), output_name="action_chunk", chunk=spec)


@pytest.mark.parametrize("denoiser", ["unet", "transformer"])
def test_denoiser_loss_falls_on_a_tiny_dataset(denoiser: str) -> None:
    policy = _policy(denoiser)
    gen = torch.Generator().manual_seed(1)
    obs = torch.randn(256, H.obs, policy.obs_dim, generator=gen)
    action = torch.tanh(obs[:, -1:, :NUM_ACTIONS]).expand(-1, H.pred, -1) * 0.8  # chunk follows the observation
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    losses = []
    for _ in range(150):
        loss, _ = policy.compute_loss(obs, action)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])


@pytest.mark.parametrize(("kind", "steps"), [("unet", 3), ("unet", 10), ("transformer", 5), ("mlp", 0)])
def test_onnx_sampler_matches_the_torch_sampler(tmp_path: Path, kind: str, steps: int) -> None:
    policy = _policy(kind, steps or 5).eval()
    contract = _chunk_contract(policy)
    path = write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path)
    rng = np.random.default_rng(0)
    obs = (rng.standard_normal((5, H.obs, policy.obs_dim)) * 2).astype(np.float32)
    noise = rng.standard_normal((5, H.pred, NUM_ACTIONS)).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"obs": obs, **({"noise": noise} if kind != "mlp" else {})}
    (onnx_chunk,) = session.run(["action_chunk"], feed)
    with torch.no_grad():  # the library's DDIM loop (diffusers.DDIMScheduler.step), not the unrolled copy
        ref = policy.predict_action_chunk(torch.from_numpy(obs), torch.from_numpy(noise)).numpy()
    assert np.abs(onnx_chunk - ref).max() <= 1e-4
    assert np.abs(ref).max() <= 1.0


def test_the_exported_mish_is_mish_over_the_whole_float_range(tmp_path: Path) -> None:
    x = torch.cat((torch.linspace(-200, 200, 4001), torch.tensor([-1e30, -88.0, 88.0, 89.0, 1e30])))[None]
    torch.onnx.export(ExportMish(), (x,), tmp_path / "mish.onnx", dynamo=False, input_names=["x"], output_names=["y"])
    (y,) = ort.InferenceSession(str(tmp_path / "mish.onnx")).run(["y"], {"x": x.numpy()})
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, torch.nn.functional.mish(x).numpy(), rtol=1e-5, atol=1e-6)


def _recording_sampler(n: int, calls: list[int]):  # type: ignore[no-untyped-def]
    def sample(window: np.ndarray) -> np.ndarray:
        calls.append(len(calls))
        plan = np.zeros((n, H.pred, 1), np.float32)
        plan[:, :, 0] = 100 * len(calls) + np.arange(H.pred)  # plan id, index in the plan
        return plan

    return sample


def test_receding_horizon_executes_action_horizon_steps_then_replans() -> None:
    calls: list[int] = []
    ex = ChunkExecutor(2, ChunkSpec(H.obs, H.pred, H.action), 1, _recording_sampler(2, calls))
    out = [ex(np.zeros((2, 3), np.float32))[:, 0] for _ in range(9)]
    assert [float(o[0]) for o in out] == [100, 101, 102, 103, 200, 201, 202, 203, 300]
    ex.reset(np.array([False, True]))  # robot 1 starts a new episode: it re-plans at once, robot 0 carries on
    o = ex(np.zeros((2, 3), np.float32))[:, 0]
    assert float(o[0]) == 301 and float(o[1]) == 400


def test_temporal_ensembling_weights_older_plans_more() -> None:
    calls: list[int] = []
    spec = ChunkSpec(H.obs, H.pred, H.action, ensemble_decay=0.5)
    ex = ChunkExecutor(1, spec, 1, _recording_sampler(1, calls))
    first = float(ex(np.zeros((1, 3), np.float32))[0, 0])
    second = float(ex(np.zeros((1, 3), np.float32))[0, 0])
    assert first == 100  # only plan 1 exists
    w_old, w_new = np.exp(0.5), 1.0  # plan 1 (one step old) predicted 101 for this step, plan 2 predicts 200
    assert second == pytest.approx((w_old * 101 + w_new * 200) / (w_old + w_new), rel=1e-6)
    assert len(calls) == 2  # ensembling plans every step


def test_history_holds_the_last_observations_oldest_first() -> None:
    seen: list[np.ndarray] = []

    def sample(window: np.ndarray) -> np.ndarray:
        seen.append(window.copy())
        return np.zeros((1, H.pred, 1), np.float32)

    ex = ChunkExecutor(1, ChunkSpec(3, H.pred, 1), 1, sample)
    for k in range(3):
        ex(np.full((1, 2), k, np.float32))
    assert seen[0][0, :, 0].tolist() == [0, 0, 0]  # fresh: the first observation fills the history
    assert seen[2][0, :, 0].tolist() == [0, 1, 2]


@pytest.fixture
def exported_diffusion(tmp_path: Path) -> Path:
    policy = _policy("unet", 3).eval()
    contract = _chunk_contract(policy)
    return write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path)


def test_chunked_runtime_maps_each_executed_action_with_the_contract(exported_diffusion: Path) -> None:
    policy = ChunkedOnnxPolicy(exported_diffusion, num_envs=1, seed=0)
    policy.self_test()
    rng = np.random.default_rng(0)
    signals = {t.source: rng.standard_normal((1, t.size)).astype(np.float32) for t in policy.contract.observation}
    commands = np.stack([policy(signals) for _ in range(2 * H.action)])
    a = policy.contract.action
    assert commands.shape == (2 * H.action, 1, NUM_ACTIONS)
    assert (commands >= np.array(a.low) - 1e-6).all() and (commands <= np.array(a.high) + 1e-6).all()
    assert policy.executor.plans == 2
    back = policy.normalized_action(commands[-1])
    assert np.abs(back).max() <= 1.0


def test_the_single_step_runtime_refuses_a_chunk_policy_by_name(exported_diffusion: Path) -> None:
    with pytest.raises(ContractError, match=r"action-chunk policy.*ChunkedOnnxPolicy"):
        OnnxPolicy(exported_diffusion)


def test_export_refuses_a_contract_that_does_not_fit(tmp_path: Path) -> None:
    policy = _policy("unet").eval()
    contract = _chunk_contract(policy)
    wrong = dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, pred_horizon=16))
    with pytest.raises(ContractError, match="horizons 2/16/4 differ from the policy's 2/8/4"):
        chunk_to_onnx_model(policy, wrong)
    with pytest.raises(ContractError, match="chunk needs 1 <= action_horizon <= pred_horizon"):
        dataclasses.replace(contract, chunk=ChunkSpec(2, 4, 8))
    with pytest.raises(ContractError, match=r"unknown chunk key\(s\) \['horizon'\]"):
        Contract.from_dict({**contract.to_dict(), "chunk": {"horizon": 3}})
    assert not list(tmp_path.iterdir())


_TORCH_FREE = """
import importlib.abc, json, sys

class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch.") or name.startswith("diffusers"):
            raise ImportError(f"{name} is blocked: the robot runtime must not need it")
        return None

sys.meta_path.insert(0, BlockTorch())
import numpy as np
from policies.runtime import ChunkedOnnxPolicy

policy = ChunkedOnnxPolicy(sys.argv[1])
policy.self_test()
signals = {t.source: np.zeros((1, t.size), np.float32) for t in policy.contract.observation}
out = [policy(signals).tolist() for _ in range(5)]
for heavy in ("torch", "diffusers", "sim", "robot_rl", "policies.nets"):
    assert heavy not in sys.modules, heavy
print(json.dumps(out))
"""


def test_chunked_runtime_runs_without_torch(exported_diffusion: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", _TORCH_FREE, str(exported_diffusion)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert np.asarray(json.loads(result.stdout)).shape == (5, 1, NUM_ACTIONS)


@pytest.mark.parametrize("decay", [-0.6, 0.0, 60.0, -1e6])
def test_temporal_ensembling_either_sign_and_no_overflow(decay: float) -> None:
    calls: list[int] = []
    ex = ChunkExecutor(1, ChunkSpec(H.obs, H.pred, H.action, ensemble_decay=decay), 1, _recording_sampler(1, calls))
    ex(np.zeros((1, 3), np.float32))
    second = float(ex(np.zeros((1, 3), np.float32))[0, 0])
    w_old = np.exp(decay) if abs(decay) < 50 else float(decay > 0)  # huge |m|: all weight on one plan
    w_new = 1.0 if abs(decay) < 50 else float(decay < 0)
    assert second == pytest.approx((w_old * 101 + w_new * 200) / (w_old + w_new), rel=1e-6)
    for _ in range(3 * H.pred):  # every plan slot filled and recycled: the weights stay finite
        assert np.isfinite(ex(np.zeros((1, 3), np.float32))).all()


def test_ensemble_decay_must_be_a_finite_number() -> None:
    contract = _chunk_contract(_policy("unet"))
    for bad in (float("nan"), float("inf"), "fast"):
        with pytest.raises(ContractError, match=r"chunk\.ensemble_decay must be"):
            dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, ensemble_decay=bad))
        if isinstance(bad, float):
            with pytest.raises(ValueError, match=r"policy\.ensemble_decay must be a finite number"):
                DiffusionStudentConfig(ensemble_decay=bad)


def test_a_zero_noise_scale_gives_the_same_plan_for_the_same_inputs(tmp_path: Path) -> None:
    policy = _policy("unet", 3).eval()
    base = _chunk_contract(policy)
    window = (np.random.default_rng(1).standard_normal((2, H.obs, base.obs_dim)) * 2).astype(np.float32)
    plans = {}
    for scale in (1.0, 0.0):
        contract = dataclasses.replace(base, chunk=dataclasses.replace(base.chunk, noise_scale=scale))
        path = write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path / f"scale{scale:g}")
        runtime = ChunkedOnnxPolicy(path, num_envs=2, seed=0)
        assert runtime.chunk.noise_scale == scale  # read back from the file
        plans[scale] = [runtime.sample(window) for _ in range(2)]
    assert np.abs(plans[1.0][0] - plans[1.0][1]).max() > 1e-3  # fresh noise: another plan
    np.testing.assert_array_equal(plans[0.0][0], plans[0.0][1])
    with torch.no_grad():  # zeros into the torch sampler: the same plan
        ref = policy.predict_action_chunk(torch.from_numpy(window), torch.zeros(2, H.pred, NUM_ACTIONS)).numpy()
    assert np.abs(plans[0.0][0] - ref).max() <= 1e-4


def test_the_noise_scale_is_checked_where_it_enters() -> None:
    contract = _chunk_contract(_policy("unet"))
    for bad, match in ((1.5, r"in \[0, 1\], got 1.5"), (-0.1, r"in \[0, 1\]"), (float("nan"), "finite"),
                       ("low", "must be a number")):  # fmt: skip
        with pytest.raises(ContractError, match=rf"chunk\.noise_scale.*{match}"):
            dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, noise_scale=bad))
    deterministic = _chunk_contract(_policy("mlp"))
    with pytest.raises(ContractError, match=r"chunk\.noise_scale is set but the graph has no noise input"):
        dataclasses.replace(deterministic, chunk=dataclasses.replace(deterministic.chunk, noise_scale=0.0))
    for bad in (1.5, float("nan")):
        with pytest.raises(ValueError, match=r"policy\.noise_scale must be in \[0, 1\]"):
            DiffusionStudentConfig(noise_scale=bad)
    with pytest.raises(ValueError, match="a 'mlp' student draws no noise"):
        student_config({"kind": "mlp", "noise_scale": 0.0})


def test_inspect_says_how_a_chunk_is_executed() -> None:
    from policies.runtime.inspect import describe

    contract = _chunk_contract(_policy("unet"))
    text = describe(contract)
    assert f"execute {contract.chunk.action_horizon}, one per control period, then plan again" in text
    ensembled = dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, ensemble_decay=-0.3))
    assert "plan every control period" in describe(ensembled) and "newer plans favoured" in describe(ensembled)
    assert "'noise' [B, 8, 4] (standard normal)" in text
    quiet = dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, noise_scale=0.0))
    assert "(zeros: a deterministic plan)" in describe(quiet)
