"""panda-multitask: only the instruction tells the worlds' goals apart; the expert lifts the named cube; cameras draw
each world's colours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import sim
from robot_rl.config import task_defaults
from sim.tasks.panda.experts import LiftExpert, MultitaskExpert, TcpJacobians
from sim.tasks.panda.multitask import (
    COLOURS,
    HELDOUT2_PHRASINGS,
    HELDOUT3_PHRASINGS,
    HELDOUT_LISTS,
    HELDOUT_PHRASINGS,
    PHRASINGS,
    PUSH_TRAIN_PHRASINGS,
    PUSH_ZONE_X_M,
    TRAIN_PHRASINGS,
    PandaMultitask,
    training_texts,
)
from sim.typed_config import ConfigError


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
    train = _env(4)
    held, held2, held3 = (_env(4, [f"env.instructions={s}"]) for s in HELDOUT_LISTS)
    assert not set(train.instructions) & set(held.instructions)
    assert not (set(train.instructions) | set(held.instructions)) & set(held2.instructions)
    assert not (set(train.instructions) | set(held.instructions) | set(held2.instructions)) & set(held3.instructions)
    assert len(train.instructions) == len(COLOURS) * len(TRAIN_PHRASINGS)
    assert len(held.instructions) == len(COLOURS) * len(HELDOUT_PHRASINGS)
    assert len(held2.instructions) == len(COLOURS) * len(HELDOUT2_PHRASINGS)
    assert len(held3.instructions) == len(COLOURS) * len(HELDOUT3_PHRASINGS)
    for env in (train, held, held2, held3):  # colour-major: index i // phrasings names colour i
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


def _first_episode_success(env: PandaMultitask, script: type) -> torch.Tensor:
    """Whether each world's first episode under ``script`` (an expert class) succeeded ``[N]``."""
    expert = script(env)
    done = torch.zeros(env.num_envs, dtype=torch.bool)
    success = torch.zeros(env.num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_length):
        _, _, term, trunc, info = env.step(expert.act())
        finished = (term | trunc) & ~done
        if finished.any():
            assert info.success is not None
            success[finished] = info.success[finished]
            done |= finished
    assert bool(done.all())
    return success


@pytest.mark.parametrize(("expert", "low", "high"), [(LiftExpert, 0.9, 1.0), (_WrongCube, 0.0, 0.0)])
def test_lifting_the_named_cube_succeeds_and_lifting_another_does_not(expert: type, low: float, high: float) -> None:
    env = _env(24)
    env.reset(seed=1)
    success = _first_episode_success(env, expert)
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


# ---------------------------------------------------------------------------------------- two skills: lift, push
SKILLS = ["env.skills=[lift,push]"]


def test_two_skills_give_six_tasks_each_named_by_skill_and_colour() -> None:
    env = _env(64, SKILLS)
    env.reset(seed=4)
    assert env.instructions == training_texts(("lift", "push"))
    assert len(env.instructions) == 2 * len(COLOURS) * len(PUSH_TRAIN_PHRASINGS)
    ids, names = env.instruction_ids(), list(COLOURS)
    for w in range(64):
        text = env.instructions[int(ids[w])]
        templates = PHRASINGS["push" if int(env.skill[w]) == 1 else "lift"]["train"]
        assert text in [t.format(c=names[int(env.colour[w, 0])]) for t in templates]
    assert 0 < int(env.skill.sum()) < 64  # both skills drawn
    wrong = _env(64, [*SKILLS, "env.instructions=wrong-skill"])
    wrong.reset(seed=4)
    assert torch.equal(wrong.skill, env.skill)  # the same episodes, told the other skill
    told = wrong.instruction_ids() // (len(COLOURS) * len(TRAIN_PHRASINGS))
    assert torch.equal(told, 1 - env.skill)
    for held in HELDOUT_LISTS:
        assert not set(training_texts(("push",))) & set(training_texts(("push",), held))
    assert env.contract_extra()["skills"] == ["lift", "push"]


def test_one_skill_is_the_lift_task_of_before() -> None:
    lift, both = _env(8), _env(8, SKILLS)
    assert lift.instructions == [t.format(c=c) for c in COLOURS for t in TRAIN_PHRASINGS]
    lift.reset(seed=0)
    assert int(lift.skill.abs().sum()) == 0 and "skills" in lift.contract_extra()
    with pytest.raises(KeyError):
        lift._model.geom("push_zone")  # the zone is drawn only where a push is asked for
    assert both._model.geom("push_zone").id >= 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.skills=[lift,fly]", "env.skills must be distinct names from lift, push"),
        ("env.skills=[]", "env.skills must be distinct names"),
        ("env.instructions=wrong-skill", "wrong-skill needs two env.skills"),
        ("env.cube_high=[0.66,0.15]", "must leave 5 cm before the push zone"),
    ],
)
def test_bad_skill_settings_are_refused_by_name(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        task_defaults("panda-multitask", [override])


def test_the_expert_pushes_the_named_cube_into_the_zone_and_a_lift_there_fails() -> None:
    """The multitask expert lifts in lift episodes and pushes in push episodes; the lift script in a push episode
    raises the named cube and does not succeed (carried is not pushed)."""
    for script, lift_low, push_low, push_high in ((MultitaskExpert, 0.9, 0.85, 1.0), (LiftExpert, 0.9, 0.0, 0.0)):
        env = _env(24, SKILLS)
        env.reset(seed=1)
        skill = env.skill.clone()
        success = _first_episode_success(env, script)
        assert 0 < int(skill.sum()) < 24
        assert float(success[skill == 0].float().mean()) >= lift_low
        assert push_low <= float(success[skill == 1].float().mean()) <= push_high


def test_the_two_scripts_share_one_jacobian_evaluation_per_period() -> None:
    env = _env(4, SKILLS)
    env.reset(seed=1)
    expert = MultitaskExpert(env)
    assert expert.push.kinematics is expert.lift.kinematics
    first = expert.lift.kinematics()
    assert expert.push.kinematics() is first  # the same joints: not computed again
    env.step(expert.act())
    again = expert.lift.kinematics()
    assert again is not first  # the arm moved: computed at the new joints, as a fresh evaluation gives them
    assert torch.equal(again, TcpJacobians(env)())


def test_collect_sets_the_scripted_experts_world(tmp_path: Path) -> None:
    from robot_rl.imitation.collect import collect
    from robot_rl.imitation.dataset import load_dataset

    collect("panda-multitask", 4, tmp_path / "d", num_envs=4, quiet=True, env_overrides=("env.skills=[lift,push]",))
    data = load_dataset(tmp_path / "d")
    assert data.robot_rl["env"]["skills"] == ["lift", "push"]
    with pytest.raises(ConfigError, match=r"env\.nope"):
        collect("panda-multitask", 4, tmp_path / "e", num_envs=4, quiet=True, env_overrides=("env.nope=1",))
    assert not (tmp_path / "e").exists()


def test_the_onboard_expert_reads_the_named_colours_estimate() -> None:
    """``cube="onboard"``: the expert acts on the colour tracker's estimate of the named cube (what a student sees),
    not on the simulator's exact position."""
    env = _env(16, SKILLS)
    obs = env.reset(seed=2)
    expert = MultitaskExpert(env, cube="onboard")
    env.step(expert.act())
    seen = env.builder.latest("object_positions").view(16, 3, 3)
    estimate = expert.lift.cube_position()
    torch.testing.assert_close(estimate, seen[torch.arange(16), env.colour[:, 0]])
    assert 0.003 < float((estimate - env.cube_pos).norm(dim=-1).mean()) < 0.05  # noise and bias, not the truth
    assert obs["policy"].shape[0] == 16


def test_a_lift_policy_sees_the_named_cubes_estimate_in_panda_lifts_layout() -> None:
    """``add_task_view("panda-lift")``: panda-lift's onboard layout, term by term, with the colour tracker's estimate
    of the episode's target (noise and bias as the ``policy`` group has them) in the place of the three cubes'."""
    from dataclasses import asdict

    from sim.vec_env import TaskConfigError

    env = _env(16)
    lift = sim.make("panda-lift", 1, "cpu", task_defaults("panda-lift").env)
    terms = env.add_task_view("panda-lift")
    assert [asdict(t) for t in terms] == [asdict(t) for t in lift.policy_terms]
    assert env.obs_sizes["panda-lift"] == lift.obs_sizes["policy"]
    obs = env.reset(seed=1)
    for _ in range(3):
        obs, *_ = env.step(0.3 * torch.ones(16, env.num_actions))
    names = [t.name for t in env.policy_terms]
    start = sum(t.dim for t in env.policy_terms[: names.index("object_positions")])
    seen = obs["policy"][:, start : start + 9].view(16, 3, 3)[torch.arange(16), env.colour[:, 0]]
    view = obs["panda-lift"]
    assert view.shape == (16, lift.obs_sizes["policy"])
    assert torch.equal(view[:, :start], obs["policy"][:, :start])
    assert torch.equal(view[:, start : start + 3], seen)
    assert torch.equal(view[:, start + 3 :], obs["policy"][:, start + 9 :])
    assert 0.003 < float((seen - env.cube_pos).norm(dim=-1).mean()) < 0.05  # the estimate, not the truth
    with pytest.raises(TaskConfigError, match=r"gives no observation of task 'panda-reach' \(it gives: panda-lift, "):
        env.add_task_view("panda-reach")
    with pytest.raises(TaskConfigError, match=r"panda-push teacher only makes the 'push' skill; .* asks for another"):
        env.add_task_view("panda-push")
    with pytest.raises(TaskConfigError, match=r"a panda-lift teacher only makes the 'lift' skill; .* others too"):
        _env(2, SKILLS).add_task_view("panda-lift")
    assert env.task_view_held("panda-lift") == []
    lift.close()
    env.close()


@pytest.mark.parametrize("gripper", ["centred", "open-at-zero"])
def test_a_push_policy_sees_the_named_cube_and_the_zone_in_panda_pushs_layout_and_its_gripper_is_held_closed(
    gripper: str,
) -> None:
    """``add_task_view("panda-push")`` with ``env.skills=[push]``: panda-push's onboard layout, term by term (no
    finger), with the named cube's estimate and the zone's middle in its lane as the goal; the gripper command the
    view holds closes the fingers in either mapping."""
    from dataclasses import asdict

    env = _env(16, ["env.skills=[push]", f"env.gripper_action={gripper}"])
    push = sim.make("panda-push", 1, "cpu", task_defaults("panda-push").env)
    terms = env.add_task_view("panda-push")
    assert [asdict(t) for t in terms] == [asdict(t) for t in push.policy_terms]
    obs = env.reset(seed=2)
    held = env.task_view_held("panda-push")
    assert len(held) == env.num_actions - push.num_actions == 1
    for _ in range(10):
        obs, *_ = env.step(torch.cat((torch.zeros(16, 7), torch.tensor(held).expand(16, 1)), 1))
    assert torch.all(env.command(torch.tensor([[0.0] * 7 + held]).expand(16, -1))[:, 7] == 0.0)  # fingers: closed
    names = [t.name for t in env.policy_terms]
    start = sum(t.dim for t in env.policy_terms[: names.index("finger_position")])
    view = obs["panda-push"]
    assert view.shape == (16, push.obs_sizes["policy"])
    assert torch.equal(view[:, :start], obs["policy"][:, :start])
    seen = obs["policy"][:, start + 1 : start + 10].view(16, 3, 3)[torch.arange(16), env.colour[:, 0]]
    assert torch.equal(view[:, start : start + 3], seen)
    assert torch.equal(view[:, start + 3 : start + 5], env.goal)
    assert torch.all((env.goal[:, 0] > PUSH_ZONE_X_M[0]) & (env.goal[:, 0] < PUSH_ZONE_X_M[1]))
    push.close()
    env.close()
