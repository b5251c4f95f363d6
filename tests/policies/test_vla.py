"""The vision-language-action policy: flow matching against a closed-form case, shapes and refusals, the exported
graph against torch, and the torch-free runtime's instructions."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.nets.chunk import Horizons
from policies.nets.export import chunk_to_onnx_model, write_onnx
from policies.nets.vla import FlowSettings, VLAPolicy, count_by_part, euler_integrate, flow_target
from policies.runtime.chunking import ChunkedOnnxPolicy
from policies.runtime.contract import ChunkSpec, ContractError
from policies.runtime.inspect import describe
from tests.policies.conftest import NUM_ACTIONS, make_contract

H = Horizons(obs=2, pred=8, action=4)
SIZE = (16, 20)
DIM = 12
"""Instruction width of the test policies (the real encoder's is 384)."""


def _policy(cameras: bool = True, language: int = DIM, tokens: int = 0, film: bool = False) -> VLAPolicy:
    torch.manual_seed(0)
    obs_dim = make_contract().obs_dim
    lo, hi = -np.ones(obs_dim) * 2, np.ones(obs_dim) * 3
    alo, ahi = -np.ones(NUM_ACTIONS) * 0.8, np.ones(NUM_ACTIONS) * 0.9
    policy = VLAPolicy(
        obs_dim, NUM_ACTIONS, H, lo, hi, alo, ahi, d_model=32, heads=4, layers=1, expert_layers=2,
        flow=FlowSettings(steps=4), cameras={"wrist": SIZE} if cameras else None, image_features=16,
        language_dim=language * max(tokens, 1), language_tokens=tokens, image_film=film,
    )  # fmt: skip
    for encoder in policy.encoders.values():  # FiLM starts as the identity: give it weights, as training would
        if encoder.film is not None:
            torch.nn.init.normal_(encoder.film.weight, std=0.5)
    return policy


def _gaussian_velocity(mu: float, sigma: float):  # type: ignore[no-untyped-def]
    """The exact marginal velocity of the flow from N(0, 1) to N(mu, sigma^2): E[a - eps | x_tau = x]."""

    def v(x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        t = tau[:, None, None]
        var = t**2 * sigma**2 + (1 - t) ** 2
        return mu + (t * sigma**2 - (1 - t)) / var * (x - t * mu)

    return v


def test_euler_integration_of_the_exact_velocity_moves_noise_to_the_data() -> None:
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(40000, 1, 1, generator=gen)
    x = euler_integrate(_gaussian_velocity(0.3, 0.2), noise, steps=400)
    assert float(x.mean()) == pytest.approx(0.3, abs=0.005)
    assert float(x.std()) == pytest.approx(0.2, abs=0.005)


@pytest.mark.parametrize("tau", [0.2, 0.7])
def test_the_flow_matching_loss_of_the_exact_velocity_is_its_closed_form_residual(tau: float) -> None:
    """Data N(mu, sigma^2) in one action dimension: at time tau the exact velocity leaves the loss
    Var(a - eps | x_tau) = sigma^2 + 1 - (tau sigma^2 - (1 - tau))^2 / (tau^2 sigma^2 + (1 - tau)^2), and any other
    velocity field more. The policy's own loss is evaluated with its velocity network replaced by the exact one."""
    mu, sigma, n = 0.3, 0.2, 200000
    policy = VLAPolicy(1, 1, Horizons(1, 1, 1), -np.ones(1), np.ones(1), -np.ones(1), np.ones(1), d_model=8, heads=2)
    exact = _gaussian_velocity(mu, sigma)
    torch.manual_seed(1)
    policy.velocity = lambda x, t, ctx: exact(x, t)  # type: ignore[method-assign]
    policy.sample_time = lambda b, device: torch.full((b,), tau)  # type: ignore[method-assign]
    action = mu + sigma * torch.randn(n, 1, 1)
    loss, _ = policy.compute_loss(torch.zeros(n, 1, 1), action)
    closed = sigma**2 + 1 - (tau * sigma**2 - (1 - tau)) ** 2 / (tau**2 * sigma**2 + (1 - tau) ** 2)
    assert float(loss) == pytest.approx(closed, rel=0.02)
    policy.velocity = lambda x, t, ctx: exact(x, t) + 0.1  # type: ignore[method-assign]
    worse, _ = policy.compute_loss(torch.zeros(n, 1, 1), action)
    assert float(worse) == pytest.approx(closed + 0.01, rel=0.02)


def test_flow_target_interpolates_noise_to_action() -> None:
    a, eps = torch.full((2, 3, 1), 0.5), torch.full((2, 3, 1), -1.0)
    x, u = flow_target(a, eps, torch.tensor([0.0, 1.0]))
    assert torch.equal(x[0], eps[0]) and torch.equal(x[1], a[1]) and torch.equal(u, a - eps)


def test_training_times_follow_pi0s_distribution() -> None:
    torch.manual_seed(0)
    tau = _policy(cameras=False).sample_time(100000, torch.device("cpu"))
    assert float(tau.min()) >= 0.0 and float(tau.max()) <= 0.999
    assert float(tau.mean()) == pytest.approx(0.999 * (1 - 1.5 / 2.5), abs=0.005)  # E[1 - Beta(1.5, 1)] = 0.4


def test_shapes_sizes_and_refused_inputs() -> None:
    policy = _policy()
    obs = torch.zeros(3, H.obs, policy.obs_dim)
    images = {"wrist": torch.zeros(3, H.obs, *SIZE, 3, dtype=torch.uint8)}
    instruction = torch.zeros(3, DIM)
    assert policy.predict_action_chunk(obs, images=images, instruction=instruction).shape == (3, H.pred, NUM_ACTIONS)
    loss, _ = policy.compute_loss(obs, torch.zeros(3, H.pred, NUM_ACTIONS), images, instruction)
    assert math.isfinite(float(loss.detach()))
    with pytest.raises(ValueError, match=r"instruction embedding must be float \[3, 12\], got none"):
        policy.predict_action_chunk(obs, images=images)
    with pytest.raises(ValueError, match=r"instruction embedding must be float \[3, 12\], got torch.float32 \[3, 5\]"):
        policy.predict_action_chunk(obs, images=images, instruction=torch.zeros(3, 5))
    with pytest.raises(ValueError, match="reads no instruction, got one"):
        _policy(language=0).predict_action_chunk(obs, images=images, instruction=instruction)
    parts = count_by_part(policy)
    assert sum(parts.values()) == policy.parameter_count() and min(parts.values()) > 0


def test_the_instruction_changes_the_plan() -> None:
    policy = _policy(cameras=False).eval()
    obs, noise = torch.zeros(1, H.obs, policy.obs_dim), torch.zeros(1, H.pred, NUM_ACTIONS)
    a = policy.predict_action_chunk(obs, noise, instruction=torch.ones(1, DIM))
    b = policy.predict_action_chunk(obs, noise, instruction=-torch.ones(1, DIM))
    assert (a - b).abs().max() > 1e-4


def test_padding_tokens_of_the_instruction_are_masked_out() -> None:
    """Token-level conditioning: an instruction of 2 tokens in 4 rows plans the same whatever the padding slots'
    learned embeddings are (no attention reaches them), and its words still steer the plan."""
    policy = _policy(cameras=False, tokens=4).eval()
    obs, noise = torch.zeros(1, H.obs, policy.obs_dim), torch.randn(1, H.pred, NUM_ACTIONS)
    words = torch.zeros(1, 4, DIM)
    words[0, :2] = torch.randn(2, DIM)
    with torch.no_grad():
        a = policy.predict_action_chunk(obs, noise, instruction=words.flatten(1))
        policy.prefix_slot[:, -2:] += 5.0 * torch.randn(2, 32)
        b = policy.predict_action_chunk(obs, noise, instruction=words.flatten(1))
        words[0, 1] = -words[0, 1]
        c = policy.predict_action_chunk(obs, noise, instruction=words.flatten(1))
    assert (a - b).abs().max() < 1e-6
    assert (a - c).abs().max() > 1e-4
    with pytest.raises(ValueError, match="language_dim 12 must be a multiple of language_tokens 5"):
        VLAPolicy(3, 2, H, -np.ones(3), np.ones(3), -np.ones(2), np.ones(2), language_dim=12, language_tokens=5)


def _language(texts: list[str], width: int = DIM) -> dict[str, object]:
    rng = np.random.default_rng(3)
    table = {t: [float(x) for x in rng.standard_normal(width)] for t in texts}
    encoder = {"name": "test-encoder", "package": "none", "version": "0", "sha256": "0" * 64}
    return {"input": "instruction", "dim": width, "encoder": encoder, "instructions": table}


def _export(policy: VLAPolicy, tmp_path: Path, language: dict[str, object]) -> Path:
    cams = {
        c: {"input": f"image_{c}", "height": hw[0], "width": hw[1], "mount": {}} for c, hw in policy.cameras.items()
    }
    spec = ChunkSpec(
        H.obs, H.pred, H.action, "noise", policy.sampler_settings(), None, cams, language, dict(policy.guide_inputs)
    )
    contract = dataclasses.replace(make_contract(), output_name="action_chunk", chunk=spec)
    return write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path)


@pytest.mark.parametrize(("tokens", "film"), [(0, False), (3, False), (0, True)])
def test_the_exported_graph_matches_torch_and_the_runtime_feeds_known_instructions(
    tmp_path: Path, tokens: int, film: bool
) -> None:
    policy = _policy(tokens=tokens, film=film).eval()
    width = DIM * max(tokens, 1)
    language = _language(["lift the red cube", "lift the blue cube"], width)
    if tokens:  # the red instruction is two tokens long, its third row padding
        language = {**language, "tokens": tokens}
        language["instructions"]["lift the red cube"][2 * DIM :] = [0.0] * DIM  # type: ignore[index]
    path = _export(policy, tmp_path, language)
    runtime = ChunkedOnnxPolicy(path, num_envs=2)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((2, H.obs, policy.obs_dim)).astype(np.float32)
    images = rng.integers(0, 256, (2, H.obs, *SIZE, 3), np.uint8)
    runtime.set_instruction("lift the red cube", np.array([True, False]))
    runtime.set_instruction("lift the blue cube", np.array([False, True]))
    runtime._rng = np.random.default_rng(7)
    plan = runtime.sample(obs, {"wrist": images})
    noise = np.random.default_rng(7).standard_normal((2, H.pred, NUM_ACTIONS), dtype=np.float32)
    table = language["instructions"]
    assert isinstance(table, dict)
    embedding = torch.tensor([table["lift the red cube"], table["lift the blue cube"]], dtype=torch.float32)
    with torch.no_grad():
        ref = policy.predict_action_chunk(
            torch.from_numpy(obs), torch.from_numpy(noise), images={"wrist": torch.from_numpy(images)},
            instruction=embedding,
        ).numpy()  # fmt: skip
    assert np.abs(plan - ref).max() <= 1e-4
    assert runtime.instructions == ["lift the red cube", "lift the blue cube"]
    text = describe(runtime.contract)
    if tokens:
        assert "instruction: input 'instruction' float [B, 36], 3 token rows of 12 by test-encoder" in text
        return
    assert "instruction: input 'instruction' float [B, 12], the embedding of the instruction by test-encoder" in text
    assert "2 instructions known (embedded in the contract):" in text and "'lift the blue cube'" in text


def test_the_runtime_names_unknown_malformed_and_missing_instructions(tmp_path: Path) -> None:
    path = _export(_policy().eval(), tmp_path, _language(["lift the red cube"]))
    runtime = ChunkedOnnxPolicy(path, num_envs=2)
    signals = {t.source: np.zeros((2, t.size), np.float32) for t in runtime.contract.observation}
    images = {"wrist": np.zeros((2, *SIZE, 3), np.uint8)}
    with pytest.raises(ContractError, match=r"no instruction for robot\(s\) \[0, 1\]: call set_instruction first"):
        runtime(signals, images)
    with pytest.raises(ContractError, match="instruction 'raise the red block' is not in the policy's table"):
        runtime.set_instruction("raise the red block")
    with pytest.raises(ContractError, match="instruction holds control characters"):
        runtime.set_instruction("lift the red cube\x1b[2J")
    with pytest.raises(ContractError, match=r"an instruction embedding must be 12 finite values, got shape \[384\]"):
        runtime.set_instruction_embedding(np.zeros(384))
    with pytest.raises(ContractError, match=r"an instruction embedding must be 12 values, got 384"):
        runtime.nearest_instruction(np.zeros(384))
    table = runtime.chunk.language["instructions"]
    known = np.asarray(table["lift the red cube"], np.float64)
    text, distance = runtime.nearest_instruction(known + 0.5 * np.eye(DIM)[0])
    assert text == "lift the red cube" and distance == pytest.approx(0.5)
    runtime.set_instruction("lift the red cube")
    assert runtime(signals, images).shape == (2, NUM_ACTIONS)


def test_contracts_with_a_malformed_language_section_are_refused(tmp_path: Path) -> None:
    policy = _policy().eval()
    bad_text = _language(["ok"])
    bad_text["instructions"] = {"x" * 300: [0.0] * DIM}
    with pytest.raises(ContractError, match=r"chunk\.language\.instructions: instruction 0 is 300 characters long"):
        _export(policy, tmp_path, bad_text)
    short = _language(["ok"])
    short["instructions"] = {"ok": [0.0] * 3}
    with pytest.raises(ContractError, match=r"chunk.language.instructions\[0\]"):
        _export(policy, tmp_path, short)
    uneven = {**_language(["ok"]), "tokens": 5}
    with pytest.raises(ContractError, match=r"chunk.language.tokens \(5\) must be >= 1 and divide chunk.language.dim"):
        _export(policy, tmp_path, uneven)
    wide = _language(["ok"])
    wide["dim"] = 8
    with pytest.raises(ContractError, match=r"chunk\.language is for 8 values, the policy reads 12"):
        wide["instructions"] = {"ok": [0.0] * 8}
        _export(policy, tmp_path, wide)


def test_any_student_kind_can_read_the_instruction(tmp_path: Path) -> None:
    """``policy.language: true`` on an MLP student: the embedding joins each step's condition, and the exported
    deterministic graph takes it as its last input."""
    from policies.nets.bc_mlp import MLPChunkPolicy

    torch.manual_seed(0)
    obs_dim = make_contract().obs_dim
    policy = MLPChunkPolicy(
        obs_dim, NUM_ACTIONS, H, -np.ones(obs_dim), np.ones(obs_dim), -np.ones(NUM_ACTIONS), np.ones(NUM_ACTIONS),
        hidden=(16,), language_dim=DIM,
    ).eval()  # fmt: skip
    assert policy.cond_dim == obs_dim + DIM
    language = _language(["lift the red cube"])
    spec = ChunkSpec(H.obs, H.pred, H.action, "", {}, None, {}, language)
    contract = dataclasses.replace(make_contract(), output_name="action_chunk", chunk=spec)
    runtime = ChunkedOnnxPolicy(write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path))
    runtime.set_instruction("lift the red cube")
    obs = np.random.default_rng(0).standard_normal((1, H.obs, obs_dim)).astype(np.float32)
    table = language["instructions"]
    assert isinstance(table, dict)
    with torch.no_grad():
        ref = policy.predict_action_chunk(
            torch.from_numpy(obs), instruction=torch.tensor([table["lift the red cube"]], dtype=torch.float32)
        ).numpy()
    assert np.abs(runtime.sample(obs) - ref).max() <= 1e-5


def test_film_conditions_what_the_image_encoder_sees_on_the_instruction() -> None:
    from policies.nets.vision import ImageEncoder

    torch.manual_seed(0)
    plain, film = ImageEncoder(*SIZE, features=8).eval(), ImageEncoder(*SIZE, features=8, condition_dim=DIM).eval()
    film.load_state_dict(plain.state_dict(), strict=False)  # the same convolutions; FiLM's own weights are zero
    images = torch.randint(0, 256, (3, *SIZE, 3), dtype=torch.uint8)
    a, b = torch.randn(3, DIM), torch.randn(3, DIM)
    assert torch.equal(film(images, a), plain(images))  # the identity at initialisation
    torch.nn.init.normal_(film.film.weight, std=0.5)  # type: ignore[union-attr]
    assert not torch.allclose(film(images, a), film(images, b))
    with pytest.raises(ValueError, match="needs its condition, and only it takes one"):
        film(images)
    with pytest.raises(ValueError, match="needs its condition, and only it takes one"):
        plain(images, a)
    policy = _policy(film=True).eval()  # in the policy: another instruction, other image features
    obs = torch.randn(2, H.obs, policy.obs_dim)
    shots = {"wrist": torch.randint(0, 256, (2, H.obs, *SIZE, 3), dtype=torch.uint8)}
    feats = [policy.image_features(shots, 2, policy.instruction(torch.randn(2, DIM)))[0] for _ in range(2)]
    assert feats[0].shape == (2, H.obs, 16) and not torch.allclose(*feats)
    noise = torch.randn(2, H.pred, NUM_ACTIONS)
    assert torch.isfinite(policy.predict_action_chunk(obs, noise, images=shots, instruction=torch.randn(2, DIM))).all()
    for bad in ({"cameras": False}, {"language": 0}, {"tokens": 3}):
        with pytest.raises(ValueError, match="image_film needs cameras and a pooled instruction embedding"):
            _policy(film=True, **bad)  # type: ignore[arg-type]
