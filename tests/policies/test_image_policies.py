"""Chunk policies that also see camera images: the encoder, the input checks, the exported graph against torch, and
the robot-side runtime feeding image histories."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.nets.bc_mlp import MLPChunkPolicy
from policies.nets.chunk import ChunkPolicy, Horizons
from policies.nets.diffusion import DiffusionPolicy, SamplerSettings
from policies.nets.export import chunk_to_onnx_model, write_onnx
from policies.nets.vision import ImageEncoder, SpatialSoftArgmax, random_shift
from policies.runtime.chunking import ChunkedOnnxPolicy, ChunkExecutor
from policies.runtime.contract import ChunkSpec, Contract, ContractError
from policies.runtime.inspect import describe
from tests.policies.conftest import NUM_ACTIONS, make_contract

H = Horizons(obs=2, pred=8, action=4)
SIZE = (16, 20)
MOUNT = {"body": "panda_hand", "pos_m": [0.05, 0.0, 0.04], "fovy_deg": 75.0}


def _policy(kind: str) -> ChunkPolicy:
    torch.manual_seed(0)
    obs_dim = make_contract().obs_dim
    ranges = (-np.ones(obs_dim) * 2, np.ones(obs_dim) * 3, -np.ones(NUM_ACTIONS) * 0.8, np.ones(NUM_ACTIONS) * 0.9)
    vision = {"cameras": {"wrist": SIZE}, "image_features": 8}
    if kind == "mlp":
        return MLPChunkPolicy(obs_dim, NUM_ACTIONS, H, *ranges, hidden=(32, 32), **vision)
    sampler = SamplerSettings(train_steps=50, inference_steps=3)
    return DiffusionPolicy(obs_dim, NUM_ACTIONS, H, *ranges, down_dims=(16, 32), sampler=sampler, **vision)


def _contract(policy: ChunkPolicy) -> Contract:
    noise = "noise" if isinstance(policy, DiffusionPolicy) else ""
    cams = {"wrist": {"input": "image_wrist", "height": SIZE[0], "width": SIZE[1], "mount": MOUNT}}
    spec = ChunkSpec(H.obs, H.pred, H.action, noise, policy.sampler_settings(), None, cams)
    return dataclasses.replace(make_contract(), output_name="action_chunk", chunk=spec)


def test_spatial_soft_argmax_finds_where_a_channel_fires() -> None:
    x = torch.full((1, 2, 5, 9), -50.0)
    x[0, 0, 4, 0] = 50.0  # bottom left
    x[0, 1, 2, 4] = 50.0  # centre
    np.testing.assert_allclose(SpatialSoftArgmax(5, 9)(x).numpy(), [[-1.0, 0.0, 1.0, 0.0]], atol=1e-5)


def test_random_shift_moves_whole_images_by_at_most_pad_pixels() -> None:
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    assert torch.equal(random_shift(x, 0), x)
    gen = torch.Generator().manual_seed(0)
    y = random_shift(x, 2, gen)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="replicate")
    for b in range(2):  # each output image is one 8 x 8 window of its padded input, all channels alike
        windows = [
            (dy, dx) for dy in range(5) for dx in range(5) if torch.equal(padded[b, :, dy : dy + 8, dx : dx + 8], y[b])
        ]
        assert len(windows) == 1


@pytest.mark.parametrize("shape", [(6, 3, 8, 8), (4, 2, 18, 9)])
def test_random_shift_is_the_padded_window_its_draws_name(shape: tuple[int, int, int, int]) -> None:
    """Clamped source indices are replicate padding: each image is the window of the padded image at the offsets
    drawn (``dy`` for all images, then ``dx``), pixel for pixel."""
    x, pad = torch.randn(shape), 3
    y = random_shift(x, pad, torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)
    dy = torch.randint(0, 2 * pad + 1, (shape[0], 1), generator=gen)
    dx = torch.randint(0, 2 * pad + 1, (shape[0], 1), generator=gen)
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad), mode="replicate")
    h, w = shape[2:]
    for b in range(shape[0]):
        r, c = int(dy[b]), int(dx[b])
        assert torch.equal(y[b], padded[b, :, r : r + h, c : c + w])


def test_image_encoder_refuses_images_of_another_size() -> None:
    enc = ImageEncoder(*SIZE, features=8)
    assert enc(torch.zeros(3, *SIZE, 3, dtype=torch.uint8)).shape == (3, 8)
    with pytest.raises(ValueError, match=r"images must be \[B, 16, 20, 3\], got \[3, 20, 16, 3\]"):
        enc(torch.zeros(3, 20, 16, 3, dtype=torch.uint8))
    assert ImageEncoder(18, 9, features=8)(torch.zeros(2, 18, 9, 3, dtype=torch.uint8)).shape == (2, 8)
    with pytest.raises(ValueError, match="at least 8 pixels a side, got 6x20"):
        ImageEncoder(6, 20)


def test_a_policy_with_cameras_names_missing_or_malformed_images() -> None:
    policy = _policy("mlp").eval()
    obs = torch.zeros(3, H.obs, policy.obs_dim)
    good = torch.zeros(3, H.obs, *SIZE, 3, dtype=torch.uint8)
    assert policy.predict_action_chunk(obs, images={"wrist": good}).shape == (3, H.pred, NUM_ACTIONS)
    with pytest.raises(ValueError, match=r"sees cameras \['wrist'\], got images of \[\]"):
        policy.predict_action_chunk(obs)
    with pytest.raises(ValueError, match=r"images 'wrist' must be uint8 \[3, 2, 16, 20, 3\], got torch.float32"):
        policy.predict_action_chunk(obs, images={"wrist": good.float()})
    with pytest.raises(ValueError, match="must be letters, digits and underscores"):
        MLPChunkPolicy(4, 1, H, *([np.zeros(4)] * 2), *([np.zeros(1)] * 2), cameras={"wrist.left": SIZE})


def test_images_change_the_plan() -> None:
    policy = _policy("mlp").eval()
    obs = torch.zeros(1, H.obs, policy.obs_dim)
    dark = torch.zeros(1, H.obs, *SIZE, 3, dtype=torch.uint8)
    lit = dark.clone()
    lit[..., 2:6, 3:9, 0] = 255  # a red patch in view
    a = policy.predict_action_chunk(obs, images={"wrist": dark})
    b = policy.predict_action_chunk(obs, images={"wrist": lit})
    assert (a - b).abs().max() > 1e-4


@pytest.mark.parametrize("kind", ["mlp", "unet"])
def test_exported_image_policy_matches_torch_and_runs_on_the_runtime(tmp_path: Path, kind: str) -> None:
    policy = _policy(kind).eval()
    contract = _contract(policy)
    path = write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path)
    rng = np.random.default_rng(0)
    obs = (rng.standard_normal((4, H.obs, policy.obs_dim))).astype(np.float32)
    images = rng.integers(0, 256, (4, H.obs, *SIZE, 3), np.uint8)
    noise = rng.standard_normal((4, H.pred, NUM_ACTIONS)).astype(np.float32)
    runtime = ChunkedOnnxPolicy(path, num_envs=4)
    runtime._rng = np.random.default_rng(7)  # the runtime's noise, replayed for torch below
    onnx_plan = runtime.sample(obs, {"wrist": images})
    noise = np.random.default_rng(7).standard_normal((4, H.pred, NUM_ACTIONS), dtype=np.float32)
    with torch.no_grad():
        ref = policy.predict_action_chunk(
            torch.from_numpy(obs), torch.from_numpy(noise), images={"wrist": torch.from_numpy(images)}
        ).numpy()
    assert np.abs(onnx_plan - ref).max() <= 1e-4
    assert "camera 'wrist': input 'image_wrist' uint8 [B, 2, 16, 20, 3]" in describe(runtime.contract)
    assert "panda_hand" in describe(runtime.contract)

    signals = {t.source: np.zeros((4, t.size), np.float32) for t in runtime.contract.observation}
    command = runtime(signals, {"wrist": images[:, -1]})
    assert command.shape == (4, NUM_ACTIONS) and np.isfinite(command).all()
    with pytest.raises(ContractError, match=r"needs images of cameras \['wrist'\], got \[\]"):
        runtime(signals)
    with pytest.raises(
        ContractError, match=r"camera 'wrist' images must be uint8 \[4, 16, 20, 3\] RGB, got uint8 \[4, 20, 16, 3\]"
    ):
        runtime(signals, {"wrist": np.zeros((4, 20, 16, 3), np.uint8)})


def test_runtime_refuses_a_contract_whose_cameras_the_graph_lacks(tmp_path: Path) -> None:
    policy = _policy("mlp").eval()
    contract = _contract(policy)
    path = write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path)
    assert ChunkedOnnxPolicy(path).self_test().shape == (1, NUM_ACTIONS)
    assert contract.chunk is not None
    no_camera = dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, cameras={}))
    with pytest.raises(ContractError, match=r"chunk.cameras \[\] differ from the policy's \['wrist'\]"):
        chunk_to_onnx_model(policy, no_camera)
    with pytest.raises(ContractError, match=r"chunk.cameras.wrist.input must be a non-empty string, got None"):
        dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, cameras={"wrist": {"height": 16}}))
    with pytest.raises(ContractError, match=r"chunk.cameras.wrist.width must be an integer in \[1, 4096\], got 0"):
        cams = {"wrist": {"input": "image_wrist", "height": 16, "width": 0}}
        dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, cameras=cams))


def test_executor_keeps_an_image_history_that_restarts_with_the_episode() -> None:
    seen: list[np.ndarray] = []

    def sample(window: np.ndarray, images: dict[str, np.ndarray]) -> np.ndarray:
        seen.append(images["wrist"][:, :, 0, 0, 0].copy())  # [N, To] frame ids
        return np.zeros((2, 1, 1), np.float32)

    ex = ChunkExecutor(2, ChunkSpec(H.obs, 1, 1), 1, sample)
    for k in range(3):
        ex(np.zeros((2, 3), np.float32), {"wrist": np.full((2, 1, 1, 3), k, np.uint8)})
    ex.reset(np.array([False, True]))
    ex(np.zeros((2, 3), np.float32), {"wrist": np.full((2, 1, 1, 3), 9, np.uint8)})
    assert [s.tolist() for s in seen] == [[[0, 0], [0, 0]], [[0, 1], [0, 1]], [[1, 2], [1, 2]], [[2, 9], [9, 9]]]
