"""Task ``panda-insert``: put a peg held in the hand into a tight hole (2 mm diametral clearance).

The peg is a 20 mm round steel pin with a rounded (hemispherical) tip, 80 mm long, clamped between the closed
fingers along the tool axis; the hole is a 22 mm bore, 30 mm deep, through a fixture clamped to the table at a
random place in front of the robot each episode. The policy commands the seven arm joints (the fingers hold the
peg). This is the tight-clearance insertion of Isaac Lab's Factory ``PegInsert`` (8 mm peg, the peg starts in the
hand, keypoint rewards at two scales) and ManiSkill's ``PegInsertionSide``; grasping is the lift task's skill, so
the peg starts held, as in Factory. The rounded tip is the assembly engineer's chamfer: it centres a peg that
arrives within a few millimetres of the bore, which the arm's joint impedance lets it follow.

Onboard (``policy``) observation::

    joint_positions [7] rad | joint_velocities [7] rad/s | tcp_position [3] m | tcp_orientation [6] |
    target_position [3] m (the bore's top centre, base frame, as a calibrated camera or a taught fixture pose gives
    it once per episode: 1 mm per-episode error; the ROS 2 node reads it from the latched goal) | last_action [7] x H

Privileged (``critic``): noise-free joints, the randomised parameters, the exact hole, the peg tip's offset from its
target in the bore, the peg's axis, and the insertion depth.

Success: at the time limit the peg tip is at least ``insert_depth`` below the bore's top face, inside the bore.
Criterion: >= 70 % of evaluation episodes.

Dimensions are a modelling choice within ISO 286 peg-and-hole practice (a 20 mm pin in a 22 mm bore), not a
part's drawing. The peg's nominal friction coefficient, 0.5, is a modelling choice too (no measured pair), randomised
0.25-0.75 to cover dry and lubricated metal contact. It is the peg-bore pair's: the peg's contact priority
(``sim.robots.panda.OBJECT_PRIORITY``) puts it over the bore's and the table's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mujoco
import numpy as np
import torch

from policies.runtime.contract import ObservationTerm
from sim import rewards
from sim.measurements import Measurement, Pose
from sim.randomization import ParamSpec, RandomizationTerm
from sim.registry import TaskSpec
from sim.robots import panda
from sim.tasks.base import SensorNoise, check_fields, check_randomization
from sim.tasks.panda.base import (
    GRIPPER_DOWN,
    PandaConfig,
    PandaTask,
    arm_param_specs,
    default_arm_noise,
    default_arm_randomization,
)
from sim.tasks.panda.experts import ScriptedExpert

PEG_RADIUS = 0.010
"""Radius of the peg, m."""
PEG_TOP = 0.085
"""Upper end of the peg's straight part, m beyond the hand origin along the tool axis (inside the finger pads, which
span 0.0754-0.1114 m: ``sim/robots/assets/panda.xml``)."""
PEG_LENGTH = 0.06
"""Length of the peg's straight part, m (the capsule adds a hemisphere of :data:`PEG_RADIUS` at each end)."""
TCP_OFFSET = 0.1034
"""The TCP site's distance beyond the hand origin, m (``sim/robots/assets/panda.xml``)."""
TIP_BEYOND_TCP = PEG_TOP + PEG_LENGTH + PEG_RADIUS - TCP_OFFSET
"""The peg tip's distance beyond the TCP along the tool axis, m (0.0516: 44 mm beyond the finger pads)."""
HOLE_RADIUS = 0.011
"""Inscribed radius of the bore, m: 1 mm radial, 2 mm diametral clearance around the nominal peg."""
HOLE_DEPTH = 0.03
"""Depth of the bore, m (the fixture's height; the bore's floor is the table)."""
WALL = 0.02
"""Radial thickness of the fixture's wall around the bore, m."""
SEGMENTS = 16
"""The bore is a regular polygon of this many flat faces (boxes), inscribed radius :data:`HOLE_RADIUS`."""
FIXTURE_CLAMP_N = 500.0
"""Dry friction holding the fixture on the table in each direction, N: a modelling choice for a clamped fixture,
chosen well above the contact forces this arm produces in training (not a clamp's data sheet)."""


def add_fixture(spec: mujoco.MjSpec) -> None:
    """Add the fixture: a ring of :data:`SEGMENTS` boxes around a vertical bore, on two clamped slide joints
    ``fixture_x`` / ``fixture_y`` (the episode's placement, m in the base frame). The fixture collides with the hand
    and the peg (contype 0 / conaffinity 2), not with the table it stands on."""
    body = spec.worldbody.add_body(name="fixture", pos=[0.0, 0.0, panda.TABLE_HEIGHT])
    for axis, name in (((1, 0, 0), "fixture_x"), ((0, 1, 0), "fixture_y")):
        joint = body.add_joint(name=name, type=mujoco.mjtJoint.mjJNT_SLIDE, axis=list(axis))
        joint.frictionloss = FIXTURE_CLAMP_N
        joint.damping[0] = 1000.0
        joint.armature = 5.0
    half_face = (HOLE_RADIUS + WALL) * math.tan(math.pi / SEGMENTS)  # long enough to close the outer gaps
    for k in range(SEGMENTS):
        angle = 2 * math.pi * k / SEGMENTS
        r = HOLE_RADIUS + WALL / 2
        body.add_geom(
            name=f"bore{k}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            pos=[r * math.cos(angle), r * math.sin(angle), HOLE_DEPTH / 2],
            quat=[math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)],
            size=[WALL / 2, half_face, HOLE_DEPTH / 2],
            mass=0.05,
            contype=0,
            conaffinity=2,
            condim=3,
            friction=[1.0, 0.005, 0.0001],
            rgba=[0.6, 0.6, 0.65, 1.0],
        )


def add_peg(spec: mujoco.MjSpec) -> None:
    """Add the peg to the hand, held along the tool axis between the closed fingers (part of the hand's rigid body:
    contacts between it and the fingers are excluded as parent-child; no mass, it is below the hand's mass
    randomisation)."""
    spec.body("panda_hand").add_geom(
        name="peg",
        type=mujoco.mjtGeom.mjGEOM_CAPSULE,
        fromto=[0.0, 0.0, PEG_TOP, 0.0, 0.0, PEG_TOP + PEG_LENGTH],
        size=[PEG_RADIUS, 0.0, 0.0],
        density=0.0,
        contype=2,
        conaffinity=1,
        condim=3,
        friction=[0.5, 0.005, 0.0001],
        priority=panda.OBJECT_PRIORITY,
        solimp=[0.95, 0.99, 0.001, 0.5, 2.0],
        rgba=[0.75, 0.75, 0.8, 1.0],
    )


def _default_rewards() -> dict[str, float]:
    # Per-second rates. As Factory's PegInsert: keypoints on the peg's axis against their places in the bore, scored
    # by the squashing kernel at a coarse and a fine scale, plus a bonus once inserted; a far-reaching tanh term
    # carries the peg over from the start pose (Factory starts within 2 cm of the hole; this task 15-35 cm away).
    return {
        "reach_hole": 1.0,
        "keypoint_coarse": 4.0,
        "keypoint_fine": 4.0,
        "inserted": 4.0,
        "action_rate": -0.02,
        "joint_velocity": -0.001,
    }


def default_insert_randomization() -> list[RandomizationTerm]:
    """Arm randomisation plus the peg: friction coefficient x 0.5-1.5 (0.25-0.75) and radius x 0.97-1.0 (diametral
    clearance 2.0-2.6 mm)."""
    return [
        *default_arm_randomization(),
        RandomizationTerm("peg_friction", "uniform", (0.5, 1.5), "scale"),
        RandomizationTerm("peg_radius", "uniform", (0.97, 1.0), "scale"),
    ]


def default_insert_noise() -> SensorNoise:
    """Arm encoders plus the bore's pose: a 1 mm per-episode error (the fixture's calibration), constant through the
    episode as the node's latched goal is."""
    noise = default_arm_noise()
    noise.bias_std["target_pos"] = 0.001
    return noise


def _model() -> mujoco.MjModel:
    return panda.build_model("impedance", panda.Scene(table=True, objects=(add_fixture, add_peg)))


@dataclass
class PandaInsertConfig(PandaConfig):
    """Configuration of ``panda-insert`` (see the module docstring and :class:`PandaConfig`).

    Attributes:
        hole_low: Lower corner of the bore's placement area (x, y), m.
        hole_high: Upper corner of the bore's placement area, m.
        insert_depth: Depth of the peg tip below the bore's top face that counts as inserted, m.
        target_depth: Depth of the tip's keypoint target, m: beyond ``insert_depth``, so that the policy pushes
            past the success bar instead of resting on it.
        reach_scale: Distance scale of the ``reach_hole`` kernel, m.
    """

    episode_length_s: float = 5.0
    hole_low: tuple[float, float] = (0.45, -0.1)
    hole_high: tuple[float, float] = (0.6, 0.1)
    insert_depth: float = 0.02
    target_depth: float = 0.025
    reach_scale: float = 0.2
    reward_scales: dict[str, float] = field(default_factory=_default_rewards)
    randomization: list[RandomizationTerm] = field(default_factory=default_insert_randomization)
    noise: SensorNoise = field(default_factory=default_insert_noise)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, ("insert_depth", "target_depth", "reach_scale"), "env.")
        check_fields(self, ("hole_low", "hole_high"), "env.", positive=False)
        if not self.insert_depth <= self.target_depth < HOLE_DEPTH:
            raise ValueError(
                f"env.insert_depth ({self.insert_depth}) <= env.target_depth ({self.target_depth}) < the bore's "
                f"depth {HOLE_DEPTH} m is required"
            )
        check_randomization(self.randomization, PandaInsert.param_specs(_model()))


class PandaInsert(PandaTask):
    """Insert the held peg into the bore (see the module docstring)."""

    task_name = "panda-insert"
    success_bar = 0.7
    median_figures = (("final_depth_m", "final_depth"),)
    finger_opening = PEG_RADIUS
    goal_state = ("hole",)

    def __init__(self, cfg: PandaInsertConfig, num_envs: int, device: torch.device, seed: int = 0) -> None:
        terms = [ObservationTerm("target_position", 3, "target_pos", unit="m")]
        scene = panda.Scene(table=True, objects=(add_fixture, add_peg))
        model = _model()
        self.hole = torch.zeros(num_envs, 3, device=device)
        self._setup(cfg, scene, num_envs, device, seed, terms, 3 + 3 + 3 + 1, self.param_specs(model))
        self.cfg: PandaInsertConfig = cfg
        self._fixture_qpos = torch.tensor(
            [int(self._model.joint(j).qposadr[0]) for j in ("fixture_x", "fixture_y")], device=device
        )
        self._peg_geom = self._model.geom("peg").id
        self._axis = torch.zeros(num_envs, 3, device=device)
        self._tip = torch.zeros(num_envs, 3, device=device)

    @staticmethod
    def param_specs(model: mujoco.MjModel) -> dict[str, ParamSpec]:
        """Randomisable parameters: the arm's and the peg's (friction, radius), nominal values from the model."""
        geom = model.geom("peg").id
        return {
            **arm_param_specs(model),
            "peg_friction": ParamSpec((float(model.geom_friction[geom][0]),), lower=0.0),
            "peg_radius": ParamSpec((float(model.geom_size[geom][0]),), lower=0.0, unit="m"),
        }

    def _task_fields(self) -> list[str]:
        return ["geom_friction", "geom_size"]

    def _task_model_params(self, rows: torch.Tensor, changed: dict[str, torch.Tensor]) -> None:
        ids = rows.to(self.physics.device)
        randomized = {t.param for t in self.cfg.randomization}
        if "peg_friction" in randomized:
            self.physics.set_field("geom_friction", ids, changed["peg_friction"][:, 0], (self._peg_geom, 0))
        if "peg_radius" in randomized:
            self.physics.set_field("geom_size", ids, changed["peg_radius"][:, 0], (self._peg_geom, 0))

    def _reset_task(self, rows: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        c, n = self.cfg, rows.numel()
        lo, hi = torch.tensor(c.hole_low, device=self.device), torch.tensor(c.hole_high, device=self.device)
        xy = lo + (hi - lo) * torch.rand(n, 2, generator=self.gen, device=self.device)
        qpos[:, self._fixture_qpos] = xy
        self.hole[rows] = torch.cat((xy, torch.full((n, 1), panda.TABLE_HEIGHT + HOLE_DEPTH, device=self.device)), 1)

    def _read_task_state(self) -> None:
        # The tool axis is the TCP frame's z; the tip lies TIP_BEYOND_TCP along it (a thinner peg's tip sits the
        # radius difference higher: within 0.3 mm).
        self._axis = self._tcp_rot[:, :, 2]
        self._tip = self._tcp_pos + TIP_BEYOND_TCP * self._axis
        xy = self.physics.qpos.to(self.device, torch.float32)[:, self._fixture_qpos]
        self.hole[:, :2] = xy

    def depth(self) -> torch.Tensor:
        """How far the peg tip is below the bore's top face, m ``[N]`` (negative above it)."""
        return self.hole[:, 2] - self._tip[:, 2]

    def off_axis(self) -> torch.Tensor:
        """Horizontal distance of the peg tip from the bore's axis, m ``[N]``."""
        return (self._tip[:, :2] - self.hole[:, :2]).norm(dim=-1)

    def tip_target(self) -> torch.Tensor:
        """Where the tip's keypoint should be: on the bore's axis, ``target_depth`` down, m ``[N, 3]``."""
        return self.hole - torch.tensor([0.0, 0.0, self.cfg.target_depth], device=self.device)

    def _keypoint_distance(self) -> torch.Tensor:
        """Mean distance of two keypoints on the peg's axis (the tip, and one peg length up the axis) from their
        places in the bore with the peg upright, m ``[N]``: position and tilt in one figure (Factory's keypoints)."""
        target = self.tip_target()
        up = torch.tensor([0.0, 0.0, PEG_LENGTH], device=self.device)
        tip = (self._tip - target).norm(dim=-1)
        top = (self._tip - PEG_LENGTH * self._axis - (target + up)).norm(dim=-1)
        return (tip + top) / 2

    def _inserted(self) -> torch.Tensor:
        return (self.depth() >= self.cfg.insert_depth) & (self.off_axis() < HOLE_RADIUS + 0.001)

    def _signals(self) -> dict[str, torch.Tensor]:
        return {**self._arm_signals(), "target_pos": self.hole}

    def _privileged(self) -> torch.Tensor:
        extra = (self.hole, self._tip - self.tip_target(), self._axis, self.depth()[:, None])
        return torch.cat((self._arm_privileged(), *extra), 1)

    def reward_names(self) -> list[str]:
        """Reward terms of this task."""
        return ["reach_hole", "keypoint_coarse", "keypoint_fine", "inserted", "action_rate", "joint_velocity"]

    def _reward_terms(self, action: torch.Tensor, terminated: torch.Tensor) -> dict[str, torch.Tensor]:
        d = self._keypoint_distance()
        return {
            "reach_hole": rewards.tanh_kernel(d, self.cfg.reach_scale),
            "keypoint_coarse": squash(d, 50.0, 2.0),
            "keypoint_fine": squash(d, 100.0, 0.0),
            "inserted": self._inserted().float(),
            "action_rate": rewards.squared_norm(action - self.last_action),
            "joint_velocity": rewards.squared_norm(self._dq),
        }

    def _terminated(self) -> torch.Tensor:
        return ~self._state_finite()

    def _success(self) -> torch.Tensor:
        return self._inserted() & ~self._terminated()

    def _episode_metrics(self) -> dict[str, torch.Tensor]:
        return {"final_depth": self.depth(), "final_off_axis": self.off_axis()}

    def _metrics(self) -> dict[str, torch.Tensor]:
        return {"keypoint_distance": self._keypoint_distance(), "depth": self.depth()}

    def _task_measurements(self, world: int) -> list[Measurement]:
        """The bore's top centre as the policy sees it in training (with its calibration error while the
        randomisation is on), latched as an operator or a fixture calibration sends it."""
        seen = self.last_signals["target_pos"][world].detach().cpu().numpy()
        return [Pose("goal", seen, np.eye(3), self.BASE_FRAME, latched=True)]

    quality_bar = 0.85
    """Success rate the deployment quality bar asks for (:meth:`quality`): training stops there, not at the 70 %
    criterion. Stopped at the criterion, the first teacher kept 71.8 % on 500 held-out episodes (selection 71.5 %)
    while its success still climbed steeply: a policy selected at the bar lands on it."""

    @classmethod
    def quality(cls, episodes: dict[str, np.ndarray]) -> tuple[bool, float]:
        """Success in >= :attr:`quality_bar` of the episodes; scored by success rate."""
        rate = float(np.mean(episodes["success"]))
        return rate >= cls.quality_bar, rate

    def contract_extra(self) -> dict[str, object]:
        """Arm facts plus the peg, the bore and the success convention."""
        c = self.cfg
        return {
            **self.arm_contract_extra(),
            "gripper": f"held at {PEG_RADIUS} m per finger, clamping the peg",
            "target": "target_position: the bore's top centre, base frame, m",
            "peg": {"radius_m": PEG_RADIUS, "tip_beyond_tcp_m": TIP_BEYOND_TCP, "tip": "hemispherical"},
            "bore": {"radius_m": HOLE_RADIUS, "depth_m": HOLE_DEPTH},
            "training_envelope": {
                "hole_low_m": list(c.hole_low),
                "hole_high_m": list(c.hole_high),
                "init_joint_range_rad": c.init_joint_range,
                "episode_length_s": c.episode_length_s,
            },
            "success": {"insert_depth_m": c.insert_depth, "rate": self.success_bar},
        }


def squash(x: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """Factory's keypoint kernel ``1 / (exp(a x) + b + exp(-a x))`` ``[N]``: ``1 / (2 + b)`` at ``x = 0``, falling
    off over ``~1/a`` m."""
    return 1.0 / (torch.exp(a * x) + b + torch.exp(-a * x))


class InsertExpert(ScriptedExpert):
    """Scripted ``panda-insert`` expert: the peg tip over the bore, then straight down to the target depth.

    No memory: a tip within :attr:`over` of the bore's axis (or already in it) descends; otherwise the TCP goes to
    :attr:`hover` above the bore, rising first if the tip is low. It reads the exact bore position.
    """

    hover = 0.04
    """Height of the tip above the bore's top face during the approach, m."""
    over = 0.003
    """A tip within this of the bore's axis descends, m."""

    def act(self) -> torch.Tensor:
        env = self.env
        assert isinstance(env, PandaInsert)
        down = torch.tensor([0.0, 0.0, TIP_BEYOND_TCP], device=env.device)
        inside = (env.off_axis() < self.over) | ((env.depth() > 0.0) & (env.off_axis() < HOLE_RADIUS))
        low = env.depth() > -self.hover / 2
        above = env.hole + torch.tensor([0.0, 0.0, self.hover], device=env.device) + down
        rise = torch.cat((env._tcp_pos[:, :2], above[:, 2:]), 1)
        target = torch.where(inside[:, None], env.tip_target() + down, torch.where(low[:, None], rise, above))
        self.phase[:] = inside.long()
        return self.arm_action(target, GRIPPER_DOWN.to(env.device).expand(env.num_envs, 3, 3))


SPEC = TaskSpec(
    name="panda-insert",
    config_cls=PandaInsertConfig,
    factory=PandaInsert,
    backend="mujoco | mjwarp",
    description="Franka Panda inserts a held 20 mm peg into a 22 mm bore (2 mm clearance) at a random place",
    robot="panda",
    success=">= 70% of 5 s episodes end with the peg tip >= 20 mm deep in the bore",
    expert="sim.tasks.panda.insert:InsertExpert",
)
"""The task's registration (sim/tasks/__init__.py lists it)."""
