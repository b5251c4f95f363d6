"""Task ``panda-press``: press the one of three table-top buttons that the goal names, and hold it down.

Three spring-loaded push buttons stand in a row on the table in front of the robot (:data:`BUTTONS`). Every
episode names one of them: the goal is the centre of its cap's top face, in the base frame, as an operator or a
perception module would send it. The fingers are held closed (7 arm actions); the arm starts near the home pose.
Pressing another button past its click point ends the episode as a failure.

This task is also the worked example of docs/architecture.md ("adding a task"): it is this module, the training
config ``configs/panda-press.yaml`` and one line in ``sim/tasks/__init__.py``. Its buttons are added to the model
here, through ``panda.Scene(objects=...)``.

Onboard (``policy``) observation::

    joint_positions [7] rad | joint_velocities [7] rad/s | tcp_position [3] m | tcp_orientation [6] |
    target_position [3] m (the named button's cap, base frame) | last_action [7] x H

Privileged (``critic``): noise-free joints, the randomised parameters, the target, the TCP's offset from it, every
button's travel and which button is named.

Success: at the time limit the named button is pressed past its click point (``click_depth``) and no other button
was. Criterion: success in >= 90 % of evaluation episodes.

The buttons are modelled on a panel-mount momentary push button: 40 mm cap, 12 mm travel, about 2 N to reach the
click point (a modelling choice within the 1-4 N operating force typical of such buttons, not one part's data sheet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np
import torch

from policies.runtime.contract import ObservationTerm
from sim import rewards
from sim.measurements import Measurement, Pose
from sim.registry import TaskSpec
from sim.robots import panda
from sim.tasks.base import check_fields, check_randomization
from sim.tasks.panda.base import GRIPPER_DOWN, PandaConfig, PandaTask, arm_param_specs
from sim.tasks.panda.experts import ScriptedExpert

BUTTONS = ((0.5, -0.15), (0.5, 0.0), (0.5, 0.15))
"""Button centres on the table, ``(x, y)`` in the base frame, m."""
HOUSING_HEIGHT = 0.03
"""Height of a button's housing above the table, m (the cap's top stands this high when released)."""
CAP_RADIUS = 0.02
"""Radius of a button's cap, m."""
TRAVEL = 0.012
"""Travel of a cap from released to its stop, m."""
SPRING = 300.0
"""Return-spring stiffness, N/m: 1.8 N at a 6 mm click point, 3.6 N at the stop; the 10 g cap sags 0.3 mm."""
FINGER_TIP_BELOW_TCP = 0.008
"""The closed finger pads' lower face lies this far beyond the TCP site along the tool axis, m
(``sim/robots/assets/panda.xml``: pads centred 0.0934 m beyond the hand origin, 0.018 m half-height; TCP 0.1034 m)."""


def add_buttons(spec: mujoco.MjSpec) -> None:
    """Add the :data:`BUTTONS` to a Panda model: each a fixed housing and a cap on a sprung slide joint ``button<i>``
    (0 released, ``-TRAVEL`` at the stop); the cap collides with the hand, not with its own housing (parent)."""
    for i, (x, y) in enumerate(BUTTONS):
        housing = spec.worldbody.add_body(name=f"button{i}_housing", pos=[x, y, panda.TABLE_HEIGHT])
        housing.add_geom(
            type=mujoco.mjtGeom.mjGEOM_BOX,
            pos=[0, 0, HOUSING_HEIGHT / 2 - TRAVEL / 2],
            size=[0.035, 0.035, HOUSING_HEIGHT / 2 - TRAVEL / 2],
            contype=1,
            conaffinity=3,
            rgba=[0.2, 0.2, 0.2, 1.0],
        )
        cap = housing.add_body(name=f"button{i}", pos=[0, 0, HOUSING_HEIGHT - 0.005])
        joint = cap.add_joint(name=f"button{i}", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[0, 0, 1])
        joint.range = [-TRAVEL, 0.0]
        joint.limited = mujoco.mjtLimited.mjLIMITED_TRUE
        joint.stiffness[0] = SPRING
        joint.damping[0] = 1.0
        joint.armature = 0.05  # the switch mechanism's moving mass; keeps the slide stiff at 4 ms steps
        cap.add_geom(
            type=mujoco.mjtGeom.mjGEOM_CYLINDER,
            size=[CAP_RADIUS, 0.005, 0],
            mass=0.01,
            contype=1,
            conaffinity=3,
            rgba=[0.8, 0.1, 0.1, 1.0] if i == 1 else [0.1, 0.3, 0.8, 1.0],
        )


def _default_rewards() -> dict[str, float]:
    # Per-second rates (the env multiplies by dt): the distance (m) pulls from afar, about 1 for being at the button,
    # up to 4 for holding it down.
    return {
        "button_distance": -1.0,
        "reach_button": 1.0,
        "press": 4.0,
        "wrong_button": -5.0,
        "action_rate": -0.02,
        "joint_velocity": -0.001,
    }


@dataclass
class PandaPressConfig(PandaConfig):
    """Configuration of ``panda-press`` (see the module docstring and :class:`PandaConfig`).

    Attributes:
        click_depth: Travel at which a button counts as pressed (its click point), m; below :data:`TRAVEL`.
        reach_scale: Distance scale of the ``reach_button`` kernel, m (the linear ``button_distance`` term pulls
            from farther away).
    """

    episode_length_s: float = 3.0
    click_depth: float = 0.006
    reach_scale: float = 0.05
    reward_scales: dict[str, float] = field(default_factory=_default_rewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, ("click_depth", "reach_scale"), "env.")
        if self.click_depth >= TRAVEL:
            raise ValueError(f"env.click_depth must be below the button's travel {TRAVEL} m, got {self.click_depth}")
        check_randomization(self.randomization, arm_param_specs(panda.build_model("impedance")))


class PandaPress(PandaTask):
    """Press the named button and hold it (see the module docstring)."""

    task_name = "panda-press"
    success_bar = 0.9
    median_figures = (("final_depth_m", "final_depth"),)
    finger_opening = 0.0
    goal_state = ("target", "_clicked_wrong")

    def __init__(self, cfg: PandaPressConfig, num_envs: int, device: torch.device, seed: int = 0) -> None:
        terms = [ObservationTerm("target_position", 3, "target_pos", unit="m")]
        self.target = torch.zeros(num_envs, dtype=torch.long, device=device)
        self._clicked_wrong = torch.zeros(num_envs, dtype=torch.bool, device=device)
        n_buttons = len(BUTTONS)
        scene = panda.Scene(table=True, objects=(add_buttons,))
        self._setup(cfg, scene, num_envs, device, seed, terms, 3 + 3 + 2 * n_buttons, {})
        self.cfg: PandaPressConfig = cfg
        self._button_qpos = torch.tensor(
            [int(self._model.joint(f"button{i}").qposadr[0]) for i in range(n_buttons)], device=device
        )
        tops = [(x, y, panda.TABLE_HEIGHT + HOUSING_HEIGHT) for x, y in BUTTONS]
        self._tops = torch.tensor(tops, dtype=torch.float32, device=device)
        self._depth = torch.zeros(num_envs, n_buttons, device=device)

    def _reset_task(self, rows: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        n = rows.numel()
        self.target[rows] = torch.randint(len(BUTTONS), (n,), generator=self.gen, device=self.device)
        self._clicked_wrong[rows] = False

    def _read_task_state(self) -> None:
        self._depth = -self.physics.qpos.to(self.device, torch.float32)[:, self._button_qpos]

    def _after_step(self) -> None:
        clicked = self._depth >= self.cfg.click_depth
        named = torch.nn.functional.one_hot(self.target, len(BUTTONS)).bool()
        self._clicked_wrong |= (clicked & ~named).any(-1)

    def target_pos(self) -> torch.Tensor:
        """Centre of the named button's released cap top, base frame, m ``[N, 3]``."""
        return self._tops[self.target]

    def _target_depth(self) -> torch.Tensor:
        """Travel of the named button, m ``[N]``."""
        return self._depth.gather(1, self.target[:, None]).squeeze(1)

    def _reach_distance(self) -> torch.Tensor:
        """TCP to the named cap's top, m ``[N]``."""
        return (self._tcp_pos - self.target_pos()).norm(dim=-1)

    def _signals(self) -> dict[str, torch.Tensor]:
        return {**self._arm_signals(), "target_pos": self.target_pos()}

    def _privileged(self) -> torch.Tensor:
        named = torch.nn.functional.one_hot(self.target, len(BUTTONS)).float()
        target = self.target_pos()
        extra = torch.cat((target, self._tcp_pos - target, self._depth / TRAVEL, named), 1)
        return torch.cat((self._arm_privileged(), extra), 1)

    def reward_names(self) -> list[str]:
        """Reward terms of this task."""
        return ["button_distance", "reach_button", "press", "wrong_button", "action_rate", "joint_velocity"]

    def _reward_terms(self, action: torch.Tensor, terminated: torch.Tensor) -> dict[str, torch.Tensor]:
        distance = self._reach_distance()
        return {
            "button_distance": distance,
            "reach_button": rewards.tanh_kernel(distance, self.cfg.reach_scale),
            "press": (self._target_depth() / self.cfg.click_depth).clamp(0.0, 1.0),
            "wrong_button": rewards.event(self._clicked_wrong & terminated, self.dt),
            "action_rate": rewards.squared_norm(action - self.last_action),
            "joint_velocity": rewards.squared_norm(self._dq),
        }

    def _terminated(self) -> torch.Tensor:
        return self._clicked_wrong | ~self._state_finite()

    def _success(self) -> torch.Tensor:
        return (self._target_depth() >= self.cfg.click_depth) & ~self._terminated()

    def _episode_metrics(self) -> dict[str, torch.Tensor]:
        return {"final_depth": self._target_depth(), "wrong_button": self._clicked_wrong.float()}

    def _metrics(self) -> dict[str, torch.Tensor]:
        return {"button_distance": self._reach_distance(), "button_depth": self._target_depth()}

    def _task_measurements(self, world: int) -> list[Measurement]:
        """The named button, as an operator sends it (latched)."""
        pos = self.target_pos()[world].detach().cpu().numpy()
        return [Pose("goal", pos, np.eye(3), self.BASE_FRAME, latched=True)]

    def contract_extra(self) -> dict[str, object]:
        """Arm facts plus the buttons and the target convention."""
        c = self.cfg
        return {
            **self.arm_contract_extra(),
            "gripper": "held closed (0 m)",
            "target": "target_position: centre of the named button's released cap top, base frame, m",
            "buttons": {
                "centres_xy_m": [list(b) for b in BUTTONS],
                "top_height_m": HOUSING_HEIGHT,
                "travel_m": TRAVEL,
                "click_depth_m": c.click_depth,
            },
            "training_envelope": {
                "targets": "one of buttons.centres_xy_m",
                "init_joint_range_rad": c.init_joint_range,
                "episode_length_s": c.episode_length_s,
            },
            "success": {"click_depth_m": c.click_depth, "rate": self.success_bar},
        }

    @classmethod
    def criterion(cls, episodes: dict[str, np.ndarray]) -> tuple[bool, dict[str, float]]:
        """Success in >= 90 % of episodes; figures: success rate, median final travel, share of wrong presses."""
        met, figures = super().criterion(episodes)
        return met, {**figures, "wrong_button_rate": float(episodes["wrong_button"].mean())}


class PressExpert(ScriptedExpert):
    """Scripted ``panda-press`` expert: over the named button, then down through its click point, and hold.

    No memory: a high TCP within :attr:`over` of the button's axis (in the table plane) descends, a low one keeps
    pressing while its finger tips are still on the cap; otherwise it goes to :attr:`hover` above the cap (rising
    first if it is low).
    """

    hover = 0.06
    """Height of the approach above the released cap top, m."""
    over = 0.01
    """A high TCP within this of the button's axis descends, m."""
    press_depth = 0.025
    """How far below the released cap top the finger tips are sent, m. The relative impedance targets settle about
    1.7 cm short of it against the spring and the joints' dry friction: the cap ends 8 mm down, past the 6 mm click
    point and short of the 12 mm stop (128 worlds, 384 episodes: 100 % success; 2 cm: 98 %, 1.5 cm: 0 %)."""

    def act(self) -> torch.Tensor:
        env = self.env
        assert isinstance(env, PandaPress)
        top, tcp = env.target_pos(), env._tcp_pos
        off_axis = (tcp[:, :2] - top[:, :2]).norm(dim=-1)
        low = tcp[:, 2] < top[:, 2] + self.hover / 2
        pressing = (off_axis < self.over) | (low & (off_axis < CAP_RADIUS))
        above = top + torch.tensor([0.0, 0.0, self.hover], device=env.device)
        rise = torch.cat((tcp[:, :2], above[:, 2:]), 1)
        press = top + torch.tensor([0.0, 0.0, FINGER_TIP_BELOW_TCP - self.press_depth], device=env.device)
        target = torch.where(pressing[:, None], press, torch.where(low[:, None], rise, above))
        self.phase[:] = pressing.long()
        return self.arm_action(target, GRIPPER_DOWN.to(env.device).expand(env.num_envs, 3, 3))


SPEC = TaskSpec(
    name="panda-press",
    config_cls=PandaPressConfig,
    factory=PandaPress,
    backend="mujoco | mjwarp",
    description="Franka Panda presses the named one of three buttons on a table and holds it down",
    robot="panda",
    success=">= 90% of 3 s episodes end with the named button held past its click point, no other pressed",
    expert="sim.tasks.panda.press:PressExpert",
)
"""The task's registration (sim/tasks/__init__.py lists it)."""
