"""The instruction subspace: training instructions pass unchanged, what no training instruction varied along is
removed, checkpoints from before it load as the identity, and the exported graph projects a raw embedding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policies.nets.instruction_subspace import InstructionSubspace
from policies.runtime.chunking import ChunkedOnnxPolicy
from policies.runtime.contract import ContractError
from policies.runtime.inspect import describe
from robot_rl.checkpoint import state_dict_mismatch
from tests.policies.test_vla import DIM, NUM_ACTIONS, H, _export, _language, _policy


def test_training_instructions_pass_and_other_directions_are_removed() -> None:
    gen = torch.Generator().manual_seed(0)
    table = torch.nn.functional.normalize(torch.randn(4, DIM, generator=gen), dim=-1)
    subspace = InstructionSubspace(DIM)
    off = torch.randn(3, DIM, generator=gen)
    torch.testing.assert_close(subspace(off), off)  # unfitted: the identity
    assert subspace.dimensions() is None
    assert subspace.fit(table) == 3 == subspace.dimensions()  # 4 points span 3 dimensions about their mean
    torch.testing.assert_close(subspace(table), table, atol=1e-5, rtol=0)
    # a step orthogonal to the span (from a training text) is removed
    basis = torch.linalg.svd(table - table.mean(0), full_matrices=False)[2][:3]
    orthogonal = off[0] - (off[0] @ basis.T) @ basis
    torch.testing.assert_close(subspace(table[1:2] + orthogonal), table[1:2], atol=1e-5, rtol=0)
    # idempotent, and a checkpoint written before the subspace existed loads as the identity
    torch.testing.assert_close(subspace(subspace(off)), subspace(off), atol=1e-5, rtol=0)
    fresh = InstructionSubspace(DIM)
    fresh.load_state_dict(subspace.state_dict())
    torch.testing.assert_close(fresh(off), subspace(off))
    legacy = InstructionSubspace(DIM)
    legacy.fit(table)
    legacy.load_state_dict({})
    torch.testing.assert_close(legacy(off), off)


def test_the_exported_graph_projects_a_raw_embedding_as_torch_does(tmp_path: Path) -> None:
    """The robot feeds the raw embedding of a text outside the table (``set_instruction_embedding``); the graph
    projects it onto the training instructions' span, as the student does in torch."""
    policy = _policy(cameras=False).eval()
    language = _language(["lift the red cube", "lift the blue cube", "lift the green cube"])
    table = language["instructions"]
    assert isinstance(table, dict)
    assert policy.fit_instructions(torch.tensor(list(table.values()), dtype=torch.float32)) == 2
    with pytest.raises(ContractError, match=r"chunk.language.subspace must be an integer in \[0, 12\], got 13"):
        _export(policy, tmp_path, {**language, "subspace": 13})
    runtime = ChunkedOnnxPolicy(_export(policy, tmp_path, {**language, "subspace": 2}), num_envs=1)
    assert "read within the 2-dimensional span of its training instructions' embeddings" in describe(runtime.contract)
    new = np.random.default_rng(5).standard_normal(DIM).astype(np.float32)
    runtime.set_instruction_embedding(new)
    obs = np.random.default_rng(1).standard_normal((1, H.obs, policy.obs_dim)).astype(np.float32)
    runtime._rng = np.random.default_rng(7)
    plan = runtime.sample(obs, {})
    noise = torch.from_numpy(np.random.default_rng(7).standard_normal((1, H.pred, NUM_ACTIONS), dtype=np.float32))
    with torch.no_grad():
        ref = policy.predict_action_chunk(torch.from_numpy(obs), noise, instruction=torch.from_numpy(new)[None])
        raw = policy.instruction_subspace
        assert raw is not None
        policy.instruction_subspace = None  # the same weights reading the embedding unprojected plan otherwise
        unprojected = policy.predict_action_chunk(torch.from_numpy(obs), noise, instruction=torch.from_numpy(new)[None])
    assert np.abs(plan - ref.numpy()).max() <= 1e-4
    assert np.abs(plan - unprojected.numpy()).max() > 1e-3


def test_nearest_reads_every_instruction_as_its_nearest_training_text() -> None:
    gen = torch.Generator().manual_seed(1)
    table = torch.nn.functional.normalize(torch.randn(5, DIM, generator=gen), dim=-1)
    subspace = InstructionSubspace(DIM)
    assert subspace.fit(table, nearest=True) == 4 and subspace.nearest() == 5
    assert torch.equal(subspace(table), table)  # training texts pass exactly
    near = table[[3, 0]] + 0.1 * torch.randn(2, DIM, generator=gen)
    assert torch.equal(subspace(near), table[[3, 0]])
    fresh = InstructionSubspace(DIM)  # a checkpoint's table is resized into a module built without one
    fresh.load_state_dict(subspace.state_dict())
    assert fresh.nearest() == 5 and torch.equal(fresh(near), table[[3, 0]])
    projected = InstructionSubspace(DIM)
    projected.fit(table)
    state = {k: v for k, v in projected.state_dict().items() if k != "anchors"}  # written before nearest
    before = InstructionSubspace(DIM)
    before.load_state_dict(state)
    assert before.nearest() == 0
    torch.testing.assert_close(before(near), projected(near))
    wide = {**subspace.state_dict(), "anchors": torch.zeros(5, DIM + 1)}  # a table of another encoder's width
    with pytest.raises(RuntimeError) as err:
        InstructionSubspace(DIM).load_state_dict(wide)
    assert state_dict_mismatch(err.value) == (
        f"size mismatch for anchors: copying a param with shape [5, {DIM + 1}] from checkpoint, "
        f"the shape in current model is [0, {DIM}]"
    )


def test_the_exported_graph_reads_the_nearest_training_text_as_torch_does(tmp_path: Path) -> None:
    policy = _policy(cameras=False).eval()
    language = _language(["lift the red cube", "lift the blue cube", "push the green cube"])
    table = language["instructions"]
    assert isinstance(table, dict)
    rows = torch.tensor(list(table.values()), dtype=torch.float32)
    policy.fit_instructions(rows, nearest=True)
    with pytest.raises(ContractError, match=r"chunk.language.nearest must be an integer in \[1, 1024\], got 0"):
        _export(policy, tmp_path, {**language, "subspace": 2, "nearest": 0})
    runtime = ChunkedOnnxPolicy(_export(policy, tmp_path, {**language, "subspace": 2, "nearest": 3}), num_envs=1)
    assert "read as the nearest of its 3 training instructions" in describe(runtime.contract)
    obs = np.random.default_rng(1).standard_normal((1, H.obs, policy.obs_dim)).astype(np.float32)
    plans = []
    for embedding in (rows[1].numpy(), rows[1].numpy() + 0.05):  # a training text, and a text near it
        runtime.set_instruction_embedding(embedding.astype(np.float32))
        runtime._rng = np.random.default_rng(7)
        plans.append(runtime.sample(obs, {}))
    noise = torch.from_numpy(np.random.default_rng(7).standard_normal((1, H.pred, NUM_ACTIONS), dtype=np.float32))
    with torch.no_grad():
        ref = policy.predict_action_chunk(torch.from_numpy(obs), noise, instruction=rows[1:2])
    assert np.abs(plans[0] - ref.numpy()).max() <= 1e-4
    assert np.abs(plans[1] - plans[0]).max() <= 1e-5  # the nearby text is read as the training text
