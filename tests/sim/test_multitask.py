"""panda-multitask: only the instruction tells the worlds' goals apart; the expert lifts the named cube; cameras draw
each world's colours."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim
from robot_rl.config import task_defaults
from sim.tasks.panda.experts import LiftExpert
from sim.tasks.panda.multitask import (
    COLOURS,
    HELDOUT2_PHRASINGS,
    HELDOUT_PHRASINGS,
    TRAIN_PHRASINGS,
    PandaMultitask,
)


def _env(n: int, overrides: list[str] | None = None, seed: int = 0) -> PandaMultitask:
    env = sim.make("panda-multitask", n, "cpu", task_defaults("panda-multitask", overrides).env, seed=seed)
    assert isinstance(env, PandaMultitask)
    return env


def test_each_world_names_one_cube_by_colour_and_sees_all_three_in_colour_order() -> None:
    env = _env(64)
    env.set_randomization(False)  # exact estimates (no noise or bias) to compare with the cubes
    obs = env.reset(seed=3)
    ids = env.instruction_ids()
    assert ids is not None
    names = list(COLOURS)
    for w in range(64):
        assert sorted(env.colour[w].tolist()) == [0, 1, 2]
        assert names[int(env.colour[w, 0])] in env.instructions[int(ids[w])].split()
    seen = env.builder.latest("object_positions").view(64, 3, 3)  # red, green, blue
    target_slot = env.colour[:, 0]
    assert torch.allclose(seen[torch.arange(64), target_slot], env.cube_pos, atol=1e-5)
    assert obs["policy"].shape == (64, env.obs_sizes["policy"])
    assert len({int(i) for i in ids}) > 4  # colours and phrasings both vary
    pairwise = (seen[:, :, None, :2] - seen[:, None, :, :2]).norm(dim=-1) + torch.eye(3) * 1.0
    assert float(pairwise.min()) > 0.085  # lanes keep neighbours clear of open fingers


def test_heldout_phrasings_are_other_words_for_the_same_goals() -> None:
    train, held, held2 = _env(4), _env(4, ["env.instructions=heldout"]), _env(4, ["env.instructions=heldout2"])
    assert not set(train.instructions) & set(held.instructions)
    assert not (set(train.instructions) | set(held.instructions)) & set(held2.instructions)
    assert len(train.instructions) == len(COLOURS) * len(TRAIN_PHRASINGS)
    assert len(held.instructions) == len(COLOURS) * len(HELDOUT_PHRASINGS)
    assert len(held2.instructions) == len(COLOURS) * len(HELDOUT2_PHRASINGS)
    for env in (train, held, held2):  # colour-major: index i // phrasings names colour i
        per = len(env.instructions) // len(COLOURS)
        for i, text in enumerate(env.instructions):
            assert [c for c in COLOURS if c in text.split()] == [list(COLOURS)[i // per]]


def test_the_probes_name_another_cube_or_nothing() -> None:
    wrong, empty = _env(32, ["env.instructions=wrong-colour"]), _env(32, ["env.instructions=empty"])
    for env in (wrong, empty):
        env.reset(seed=2)
    names = list(COLOURS)
    ids = wrong.instruction_ids()
    for w in range(32):
        said = wrong.instructions[int(ids[w])].split()
        assert names[int(wrong.colour[w, 0])] not in said and names[int(wrong.colour[w, 1])] in said
    assert empty.instructions == [""] and int(empty.instruction_ids().max()) == 0


class _WrongCube(LiftExpert):
    """The lift script aimed at the first distractor."""

    def cube_position(self) -> torch.Tensor:
        env = self.env
        assert isinstance(env, PandaMultitask)
        return env.others_pos[:, 0]


@pytest.mark.parametrize(("expert", "low", "high"), [(LiftExpert, 0.9, 1.0), (_WrongCube, 0.0, 0.0)])
def test_lifting_the_named_cube_succeeds_and_lifting_another_does_not(expert: type, low: float, high: float) -> None:
    env = _env(24)
    env.reset(seed=1)
    script = expert(env)
    done = torch.zeros(24, dtype=torch.bool)
    success = torch.zeros(24, dtype=torch.bool)
    for _ in range(env.max_episode_length):
        _, _, term, trunc, info = env.step(script.act())
        finished = (term | trunc) & ~done
        if finished.any():
            assert info.success is not None
            success[finished] = info.success[finished]
            done |= finished
    assert bool(done.all())
    assert low <= float(success.float().mean()) <= high
    if expert is _WrongCube:  # the distractor did go up: the script works, the cube was the wrong one
        assert float(env.others_pos[:, 0, 2].max()) > 0.0


def test_cameras_draw_each_worlds_colours() -> None:
    from sim.rendering import CameraRenderer

    env = _env(2)
    env.reset(seed=0)
    camera = CameraRenderer(env, {"front": (64, 64)})
    try:
        first = camera.render()["front"]
        env.colour[:] = env.colour[:, [1, 2, 0]]  # the same scene, the colours moved round
        second = camera.render()["front"]
    finally:
        camera.close()
    for views in (first, second):
        for img in views.astype(int):
            r, g, b = img[..., 0], img[..., 1], img[..., 2]
            assert ((r > 120) & (g < 80) & (b < 80)).any()  # a red cube
            assert ((g > 100) & (r < 80) & (b < 80)).any()  # a green cube
            assert ((b > 120) & (r < 80) & (g < 110)).any()  # a blue cube
    assert np.abs(first.astype(int) - second.astype(int)).max() > 100


@pytest.mark.xdist_group("mjwarp")
def test_the_expert_lifts_the_named_cube_on_mjwarp_with_buffers_for_three_cubes() -> None:
    from sim.backends.mjwarp import NJMAX_PER_WORLD, free_bodies

    env = _env(8, ["env.backend=mjwarp"])
    assert free_bodies(env._model) == 3 and env.physics.d.njmax == 3 * NJMAX_PER_WORLD  # type: ignore[attr-defined]
    env.reset(seed=1)
    script = LiftExpert(env)
    for _ in range(env.max_episode_length - 1):
        env.step(script.act())
    _, _, _, trunc, info = env.step(script.act())
    assert bool(trunc.all()) and info.success is not None
    assert float(info.success.float().mean()) >= 7 / 8
