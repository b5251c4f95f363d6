"""Task ``panda-multitask``: three cubes of different colours on the table; a language instruction says which one to
lift (and, with ``env.skills: [lift, push]``, whether to lift it or push it into the zone at the back of the table).
Only the instruction tells the worlds' goals apart, so a policy that ignores it lifts the right cube in about a third
of the episodes.

Every episode draws the skill (one of ``env.skills``, uniformly), which cube is the target, the three colours (red,
green, blue: one per cube), the cubes' places (one per lane across the table, shuffled, so that open fingers around one
cube clear its neighbours) and the instruction: one of the skill's training phrasings (:data:`TRAIN_PHRASINGS`,
:data:`PUSH_TRAIN_PHRASINGS`) for the target's colour (``env.instructions: train``), or one of the held-out paraphrases
(:data:`HELDOUT_PHRASINGS`, :data:`PUSH_HELDOUT_PHRASINGS`; ``env.instructions: heldout``), written before any policy
was trained on them and never used in training, for measuring how a language-conditioned policy copes with paraphrases
(and two more such lists, ``heldout2`` and ``heldout3``). Three probes measure whether a policy uses the instruction at
all: ``wrong-colour`` names another cube's colour (the target is still the cube the episode drew), ``wrong-skill`` asks
for the other skill (two skills only), ``empty`` gives the empty instruction.

Physics are ``panda-lift``'s for the target (its mass, size and friction are randomised; the distractors are nominal
cubes). Success for ``lift``: ``panda-lift``'s. Success for ``push``: at the time limit the target's centre is inside
the zone (between :data:`PUSH_ZONE_X_M`'s edges, base x; a strip drawn on the table, :func:`push_zone`) with the cube
resting on the table (below ``lifted_height``: carried there is not pushed) and still in its lane. The zone lies
beyond every start place, 8-28 cm ahead of the cube along x, so the push never crosses a neighbour's lane.

The world's instruction is the task's, not an observation: :attr:`PandaMultitask.instructions` lists the texts,
:meth:`PandaMultitask.instruction_ids` says which one each world got (``robot-rl collect`` records it as the
episode's task text; a language-conditioned student reads it).

Onboard (``policy``) observation::

    joint_positions [7] rad | joint_velocities [7] rad/s | tcp_position [3] m | tcp_orientation [6] |
    finger_position [1] m | object_positions [9] m (red, green, blue cube centres: a colour tracker's estimate,
    delayed, noisy, biased) | last_action [8] x H

A ``panda-lift`` policy acts here too (:meth:`~sim.tasks.base.BatchedTask.add_task_view`: that task's onboard
layout with the target's estimate alone), so a lift teacher records demonstrations for language-conditioned students
(``robot-rl collect panda-multitask --teacher LIFT_RUN``). So does a ``panda-push`` policy where the instructions
only push (``env.skills: [push]``): the target's estimate, and the zone's middle in its lane as the goal; the gripper
is held closed, as ``panda-push`` holds it (a teacher trained for this goal: ``env.goal_x``, docs/vla.md).

Cameras (``robot-rl collect --images front``) draw each world's colours (:meth:`PandaMultitask.drawn_geom_rgba`).

Privileged (``critic``): ``panda-lift``'s (exact target pose and velocity, pad forces, randomised parameters) plus
the distractors' exact positions, and with two skills the episode's skill (one-hot, ``env.skills`` order).

Success: the target cube lifted as in ``panda-lift`` (or pushed into the zone, above); moving another cube is not a
success, nor is lifting the cube an instruction said to push. Criterion: >= 80 %.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import mujoco
import numpy as np
import torch

from policies.runtime.contract import ObservationTerm
from sim import rewards
from sim.measurements import Instruction, Measurement, Pose
from sim.registry import TaskSpec
from sim.robots import panda
from sim.tasks.base import SensorNoise
from sim.tasks.panda.base import CUBE_MASS, CubeTask, default_cube_noise, gripper_scale_offset
from sim.tasks.panda.lift import PandaLift, PandaLiftConfig, default_lift_rewards
from sim.tasks.panda.push import PandaPush
from sim.vec_env import TaskConfigError

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.15, 0.12),
    "green": (0.15, 0.70, 0.20),
    "blue": (0.12, 0.30, 0.85),
}
"""The cubes' colours (RGB in [0, 1]), in the order of the ``object_positions`` observation."""

TRAIN_PHRASINGS = ("lift the {c} cube", "pick up the {c} cube", "grasp the {c} cube and raise it")
"""Instruction templates used in training and in the default evaluation (``{c}``: the colour's name). Eight (these
and five more without a word of the held-out list) trained a student that did worse on the held-out paraphrases
(11.0 % against 20.0 %, docs/vla.md, a student reading the raw embedding); what closed the gap was reading the
instruction within the span of the training texts' embeddings (:mod:`policies.nets.instruction_subspace`)."""

HELDOUT_PHRASINGS = ("raise the {c} block", "take the {c} one off the table", "can you hold up the {c} box")
"""Paraphrases never used in training (``env.instructions: heldout``), fixed before any policy was trained."""
HELDOUT2_PHRASINGS = ("hoist the {c} block", "bring the {c} box into the air", "i want the {c} one held high")
"""A second list of paraphrases never used in training (``env.instructions: heldout2``), written on 2026-11-30 after
the instruction subspace (:mod:`policies.nets.instruction_subspace`) was chosen by its score on
:data:`HELDOUT_PHRASINGS` and before any student with it was evaluated on these: a test the choice never saw."""
HELDOUT3_PHRASINGS = (
    "please pick the {c} block up",
    "get the {c} cube up in the air",
    "grab the {c} one and hold it up",
)
"""A third list of paraphrases never used in training (``env.instructions: heldout3``), written on 2026-12-05 before
other readings of the instruction were tried on the first two lists (docs/vla.md): a test none of them saw."""
PUSH_TRAIN_PHRASINGS = (
    "push the {c} cube to the far side",
    "slide the {c} cube away from the robot",
    "shove the {c} cube to the back of the table",
)
"""Training phrasings of the ``push`` skill (``env.skills``)."""
PUSH_HELDOUT_PHRASINGS = (
    "nudge the {c} block toward the far edge",
    "move the {c} one away from you without lifting it",
    "can you slide the {c} box back",
)
"""Held-out paraphrases of the ``push`` skill, written on 2026-11-30 before any policy was trained on the skill."""
PUSH_HELDOUT2_PHRASINGS = (
    "send the {c} block to the back",
    "push the {c} box as far as the line",
    "i want the {c} one slid away",
)
"""A second list of held-out ``push`` paraphrases, written with :data:`PUSH_HELDOUT_PHRASINGS`."""
PUSH_HELDOUT3_PHRASINGS = (
    "push the {c} block away",
    "move the {c} cube to the far end of the table",
    "slide the {c} one toward the back",
)
"""A third list of held-out ``push`` paraphrases, written with :data:`HELDOUT3_PHRASINGS`."""
SKILLS = ("lift", "push")
"""What ``env.skills`` may hold, in the order of the instruction table."""
PHRASINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "lift": {
        "train": TRAIN_PHRASINGS,
        "heldout": HELDOUT_PHRASINGS,
        "heldout2": HELDOUT2_PHRASINGS,
        "heldout3": HELDOUT3_PHRASINGS,
    },
    "push": {
        "train": PUSH_TRAIN_PHRASINGS,
        "heldout": PUSH_HELDOUT_PHRASINGS,
        "heldout2": PUSH_HELDOUT2_PHRASINGS,
        "heldout3": PUSH_HELDOUT3_PHRASINGS,
    },
}
"""Instruction templates by skill and list (``{c}``: the colour's name); every list has as many as the others."""
HELDOUT_LISTS = ("heldout", "heldout2", "heldout3")
"""The held-out paraphrase lists of :data:`PHRASINGS`, in the order they were written."""
INSTRUCTION_SETS = ("train", *HELDOUT_LISTS, "wrong-colour", "wrong-skill", "empty")
"""What ``env.instructions`` may choose (see the module docstring)."""

LANES_Y = (-0.12, 0.0, 0.12)
"""Lane centres across the table (base y), m: one cube per lane, so the fingers (opened 8 cm along y around one cube,
about 5 cm each side with the pads) clear a neighbour's near face (>= 6.5 cm away with the lanes' jitter)."""
LANE_JITTER_M = 0.015
"""Largest shift of a cube from its lane's centre along y, m."""
PUSH_ZONE_X_M = (0.68, 0.80)
"""The push zone's near and far edges along base x, m: 8 cm beyond the farthest start (``cube_high`` x 0.6), inside
the table (it ends at 0.95 m) and inside the arm's reach (Franka Emika Panda datasheet: maximum reach 855 mm; the
scripted expert pushes 99 % of cubes into it, so the model's joint limits allow it)."""
PUSH_LANE_M = 0.05
"""A pushed cube still in its lane: its centre within this of where it started along y, m (half the gap to the
neighbouring lane's cube)."""
PUSH_GOAL_X_M = 0.5 * (PUSH_ZONE_X_M[0] + PUSH_ZONE_X_M[1])
"""Where the scripted push takes the cube's centre along x, m: the zone's middle (it stops 2 cm short). Aimed 4 cm
past the near edge instead, a student's pushes ended short of the zone in 67 % of its push episodes (median 4.7 cm
short; docs/vla.md)."""


def push_zone(spec: mujoco.MjSpec) -> None:
    """Draw the push zone (:data:`PUSH_ZONE_X_M`) on the table: a white strip across the lanes, visual only."""
    near, far = PUSH_ZONE_X_M
    half_y = LANES_Y[-1] + 0.06
    spec.worldbody.add_geom(
        name="push_zone", type=mujoco.mjtGeom.mjGEOM_BOX, pos=[(near + far) / 2, 0.0, panda.TABLE_HEIGHT + 0.0005],
        size=[(far - near) / 2, half_y, 0.0005], contype=0, conaffinity=0, rgba=[0.95, 0.95, 0.9, 1.0],
    )  # fmt: skip


def distractors(size: float) -> Callable[[mujoco.MjSpec], None]:
    """What adds the two distractor cubes (``distractor0``, ``distractor1``): the task cube's twins at its nominal
    edge ``size`` (m) and mass (:func:`sim.robots.panda.add_cube`), parked off the start area until a reset places
    them."""

    def add(spec: mujoco.MjSpec) -> None:
        for i in range(2):
            panda.add_cube(spec, f"distractor{i}", size, CUBE_MASS, (0.5, 0.3 + 0.1 * i), (0.5, 0.5, 0.5))

    return add


def _default_rewards() -> dict[str, float]:
    # panda-lift's staged terms (paid in lift episodes only), and for push episodes the cube's approach to the zone
    # and a bonus while it is inside, weighted as lift's "lifted" and "lift". Demonstrations come from a panda-lift
    # teacher (the task's view of panda-lift) and the scripted experts; the reward is there for a teacher of this
    # task (configs/panda-multitask.yaml: 4 % after 14.4 M env steps).
    return {**default_lift_rewards(), "push_progress": 15.0, "in_zone": 15.0}


def default_multitask_noise() -> SensorNoise:
    """``panda-lift``'s arm encoders and cube tracker (5 mm white noise, 1 cm per-episode bias), on each of the three
    cube estimates."""
    noise = default_cube_noise()
    noise.std["objects_pos"] = noise.std.pop("object_pos")
    noise.bias_std["objects_pos"] = noise.bias_std.pop("object_pos")
    return noise


@dataclass
class PandaMultitaskConfig(PandaLiftConfig):
    """Configuration of ``panda-multitask`` (see the module docstring and :class:`PandaLiftConfig`).

    Attributes:
        skills: What the instructions ask for: ``lift`` the named cube, ``push`` it into the zone (see the module
            docstring); each episode draws one, uniformly.
        instructions: ``train`` (:data:`PHRASINGS` ``[skill]["train"]``), a held-out list (:data:`HELDOUT_LISTS`),
            or the probes ``wrong-colour`` (a training phrasing naming another cube's colour), ``wrong-skill`` (the
            other skill's training phrasing, the right colour) and ``empty``.
        task_view: ``panda-lift``: every world also gives that task's onboard view (observation group
            ``panda-lift``, :meth:`~sim.tasks.base.BatchedTask.add_task_view`), so a PPO actor may read it here:
            ``robot-rl train panda-multitask --set env.task_view=panda-lift --set 'policy.actor_obs=[panda-lift]'
            --init-from LIFT_RUN`` goes on training a lift teacher beside the other cubes. ``""`` (default): none.
    """

    skills: tuple[str, ...] = ("lift",)
    instructions: Literal["train", "heldout", "heldout2", "heldout3", "wrong-colour", "wrong-skill", "empty"] = "train"
    task_view: Literal["", "panda-lift"] = ""
    noise: SensorNoise = field(default_factory=default_multitask_noise)
    reward_scales: dict[str, float] = field(default_factory=_default_rewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.instructions not in INSTRUCTION_SETS:
            raise TaskConfigError(
                f"env.instructions must be one of {', '.join(INSTRUCTION_SETS)}, got {self.instructions!r}"
            )
        if not self.skills or len(set(self.skills)) != len(self.skills) or not set(self.skills) <= set(SKILLS):
            raise TaskConfigError(
                f"env.skills must be distinct names from {', '.join(SKILLS)}, got {list(self.skills)}"
            )
        if self.instructions == "wrong-skill" and len(self.skills) < 2:
            raise TaskConfigError("env.instructions=wrong-skill needs two env.skills to ask for the other one")
        if self.cube_high[0] + self.cube_size / 2 > PUSH_ZONE_X_M[0] - 0.05:
            raise TaskConfigError(
                f"env.cube_high x ({self.cube_high[0]}) must leave 5 cm before the push zone at {PUSH_ZONE_X_M[0]} m"
            )
        if not (self.cube_low[1] <= LANES_Y[0] - LANE_JITTER_M and self.cube_high[1] >= LANES_Y[-1] + LANE_JITTER_M):
            raise TaskConfigError(
                f"env.cube_low/high y ({self.cube_low[1]}, {self.cube_high[1]}) must span the lanes "
                f"{LANES_Y[0] - LANE_JITTER_M:g} .. {LANES_Y[-1] + LANE_JITTER_M:g} m"
            )


def training_texts(skills: tuple[str, ...], phrasings: str = "train") -> list[str]:
    """The instruction texts of ``skills`` from one list of :data:`PHRASINGS` (``train`` or a held-out list):
    skill-major, then colour (:data:`COLOURS`), then phrasing; the task's instruction ids index it."""
    return [t.format(c=c) for s in skills for c in COLOURS for t in PHRASINGS[s][phrasings]]


class PandaMultitask(PandaLift):
    """Lift (or push) the cube the instruction names (see the module docstring)."""

    task_name = "panda-multitask"
    success_bar = 0.8
    median_figures = (("final_height_m", "final_height"), ("closest_approach_m", "closest_approach"))

    goal_state: tuple[str, ...] = ("_cube_seen", "_others_seen", "colour", "phrase", "closest", "skill", "goal")

    def __init__(self, cfg: PandaMultitaskConfig, num_envs: int, device: torch.device, seed: int = 0) -> None:
        zone = (push_zone,) if "push" in cfg.skills else ()
        scene = dataclasses.replace(cfg.scene(), objects=(distractors(cfg.cube_size), *zone))
        model = panda.build_model(cfg.control_mode, scene, cfg.stiffness, cfg.damping, cfg.physics_dt)  # type: ignore[arg-type]
        terms = [
            ObservationTerm("finger_position", 1, "finger_pos", unit="m"),
            ObservationTerm("object_positions", 3 * len(COLOURS), "objects_pos", unit="m"),
        ]
        asked = len(cfg.skills) if len(cfg.skills) > 1 else 0  # a privileged teacher must be told the skill
        self._setup(cfg, scene, num_envs, device, seed, terms, 15 + 6 + asked, CubeTask.cube_param_specs(model))
        self._setup_cube(self._model)
        self.cfg: PandaMultitaskConfig = cfg
        m = self._model
        self._others_qpos = torch.stack(
            [torch.arange(a, a + 7) for a in (int(m.joint(f"distractor{i}").qposadr[0]) for i in range(2))]
        ).to(device)  # [2, 7]
        self._geoms = [self._cube_geom, m.geom("distractor0").id, m.geom("distractor1").id]
        n = num_envs
        self.others_pos = torch.zeros(n, 2, 3, device=device)
        self._others_seen = torch.zeros(n, self.object_delay + 1, 2, 3, device=device)
        self.colour = torch.zeros(n, 3, dtype=torch.long, device=device)
        """Colour index (:data:`COLOURS` order) of the target and the two distractors ``[N, 3]``."""
        self.phrase = torch.zeros(n, dtype=torch.long, device=device)
        """Template index of each world's instruction ``[N]``."""
        self.skill = torch.zeros(n, dtype=torch.long, device=device)
        """Skill of each world's episode, an index into :data:`SKILLS` ``[N]``."""
        self.goal = torch.zeros(n, 2, device=device)
        """Where a push takes the target's centre (x, y), m ``[N, 2]``: the zone's middle in the cube's lane (the
        scripted push expert's goal; success needs only the zone and the lane)."""
        self._start_y = torch.zeros(n, device=device)
        self.closest = torch.full((n,), math.inf, device=device)
        """Closest the TCP came to the named cube's centre in this episode, m ``[N]`` (does the arm go where the
        instruction says, grasped or not)."""
        self._rgba = torch.tensor([[*rgb, 1.0] for rgb in COLOURS.values()], device=device)
        if cfg.task_view:
            self.add_task_view(cfg.task_view)

    # ------------------------------------------------------------------------------------------ language
    @property
    def instructions(self) -> list[str]:
        """Every instruction text the task gives (``env.instructions``), indexed by :meth:`instruction_ids`:
        skill-major (``env.skills`` order), then colour (:data:`COLOURS`), then phrasing."""
        if self.cfg.instructions == "empty":
            return [""]
        return training_texts(self.cfg.skills, self._list)

    @property
    def _list(self) -> str:
        """Which phrasings this episode's instructions are drawn from (the probes use the training ones)."""
        return self.cfg.instructions if self.cfg.instructions in HELDOUT_LISTS else "train"

    def instruction_ids(self) -> torch.Tensor:
        """Index into :attr:`instructions` of each world's current instruction ``[N]`` (long)."""
        named = self.colour[:, 0]  # the target's colour, or with the wrong-colour probe the first distractor's
        if self.cfg.instructions == "empty":
            return torch.zeros_like(named)
        if self.cfg.instructions == "wrong-colour":
            named = self.colour[:, 1]
        skill = self.skill
        if self.cfg.instructions == "wrong-skill":
            skill = (skill + 1) % len(self.cfg.skills)
        return (skill * len(COLOURS) + named) * len(TRAIN_PHRASINGS) + self.phrase

    def _pushing(self) -> torch.Tensor:
        """Worlds whose episode asks for a push ``[N]`` (bool)."""
        if "push" not in self.cfg.skills:
            return torch.zeros_like(self.skill, dtype=torch.bool)
        return self.skill == self.cfg.skills.index("push")

    # ------------------------------------------------------------------------------------------ episodes
    def _reset_task(self, rows: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        c, n, dev, g = self.cfg, rows.numel(), self.device, self.gen
        lane = torch.rand(n, 3, generator=g, device=dev).argsort(-1)  # lane of the target and the distractors
        y = torch.tensor(LANES_Y, device=dev)[lane]
        y = y + LANE_JITTER_M * (2 * torch.rand(n, 3, generator=g, device=dev) - 1)
        x = c.cube_low[0] + (c.cube_high[0] - c.cube_low[0]) * torch.rand(n, 3, generator=g, device=dev)
        xy = torch.stack((x, y), -1)  # [n, 3 cubes, 2]
        self._place_cube(rows, qpos, xy[:, 0])
        half = c.cube_size / 2
        for i in range(2):
            adr = self._others_qpos[i]
            qpos[:, adr[:2]] = xy[:, i + 1]
            qpos[:, adr[2]] = panda.TABLE_HEIGHT + half
            qpos[:, adr[3:]] = torch.tensor([1.0, 0.0, 0.0, 0.0], device=dev)
            self._others_seen[rows, :, i] = qpos[:, adr[:3]].unsqueeze(1)
        target = torch.randint(0, 3, (n,), generator=g, device=dev)
        swap = torch.randint(0, 2, (n,), generator=g, device=dev)
        self.colour[rows] = torch.stack((target, (target + 1 + swap) % 3, (target + 2 - swap) % 3), -1)
        self.phrase[rows] = torch.randint(0, len(TRAIN_PHRASINGS), (n,), generator=g, device=dev)
        if len(c.skills) > 1:  # one skill draws nothing, so lift-only episodes are those of before the skills
            self.skill[rows] = torch.randint(0, len(c.skills), (n,), generator=g, device=dev)
        self._start_y[rows] = xy[:, 0, 1]
        goal_x = torch.full_like(xy[:, 0, 1], PUSH_GOAL_X_M)
        self.goal[rows] = torch.stack((goal_x, xy[:, 0, 1]), -1)
        self.closest[rows] = math.inf

    def _read_task_state(self) -> None:
        super()._read_task_state()
        qpos = self.physics.qpos.to(self.device, torch.float32)
        self.others_pos = qpos[:, self._others_qpos[:, :3]]  # [N, 2, 3]

    def _after_step(self) -> None:
        super()._after_step()
        self._others_seen = torch.cat((self.others_pos.unsqueeze(1), self._others_seen[:, :-1]), 1)
        self.closest = torch.minimum(self.closest, (self._tcp_pos - self.cube_pos).norm(dim=-1))

    def _by_colour(self, target: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
        """The target's ``[N, 3]`` and distractors' ``[N, 2, 3]`` positions in :data:`COLOURS` order, ``[N, 9]``."""
        cubes = torch.cat((target.unsqueeze(1), others), 1)
        slot = self.colour.argsort(-1)  # slot[c] = which cube has colour c
        return cubes.gather(1, slot.unsqueeze(-1).expand(-1, -1, 3)).flatten(1)

    def _signals(self) -> dict[str, torch.Tensor]:
        return {
            **self._arm_signals(),
            "finger_pos": self._finger(),
            "objects_pos": self._by_colour(self._cube_seen[:, -1], self._others_seen[:, -1]),
        }

    task_views = ("panda-lift", "panda-push")

    def _task_view_terms(self, task: str) -> list[ObservationTerm]:
        """That task's onboard layout, this task's terms with the named cube's estimate (``object_position [3]``)
        in the place of the three (the instruction tells a student which cube): ``panda-lift``'s as they are;
        ``panda-push``'s without the finger and with the zone's middle in the cube's lane (``goal_position [2]``).

        Raises:
            TaskConfigError: ``env.skills`` asks for another skill than the teacher's task makes.
        """
        skill = {"panda-lift": "lift", "panda-push": "push"}[task]
        if tuple(self.cfg.skills) != (skill,):
            raise TaskConfigError(
                f"a {task} teacher only makes the '{skill}' skill; env.skills={list(self.cfg.skills)} asks for "
                f"{'others too' if skill in self.cfg.skills else 'another'} (--set 'env.skills=[{skill}]')"
            )
        one = [ObservationTerm("object_position", 3, "object_pos", unit="m")]
        if task == "panda-push":
            one.append(ObservationTerm("goal_position", 2, "goal_xy", unit="m"))
        terms: list[ObservationTerm] = []
        for t in self.policy_terms:
            if t.source == "objects_pos":
                terms.extend(one)
            elif not (task == "panda-push" and t.source == "finger_pos"):
                terms.append(t)
        return terms

    def _task_view_signals(self, task: str, signals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The signals with ``object_pos [N, 3]``, the colour tracker's estimate of the episode's target, m (and
        ``goal_xy [N, 2]``, where the push takes it, m)."""
        seen = signals["objects_pos"].view(self.num_envs, len(COLOURS), 3)
        return {**signals, "object_pos": seen[self._rows, self.colour[:, 0]], "goal_xy": self.goal}

    def task_view_held(self, task: str) -> list[float]:
        """A ``panda-push`` policy's gripper: held closed (``PandaPush.finger_opening``) in this task's mapping."""
        if task != "panda-push":
            return []
        scale, offset = gripper_scale_offset(self.cfg.gripper_action)
        return [(PandaPush.finger_opening - offset) / scale]

    def cube_estimate(self) -> torch.Tensor:
        """The named cube's centre as the latest onboard observation gives it (the colour tracker's estimate of the
        target's colour), m ``[N, 3]``."""
        seen = self.builder.latest("object_positions").view(self.num_envs, len(COLOURS), 3)
        return seen[self._rows, self.colour[:, 0]]

    def _privileged(self) -> torch.Tensor:
        extra = [self.others_pos.flatten(1)]
        if len(self.cfg.skills) > 1:  # which skill the episode asks for, one-hot (env.skills order)
            extra.append(torch.nn.functional.one_hot(self.skill, len(self.cfg.skills)).float())
        return torch.cat((super()._privileged(), *extra), 1)

    # ------------------------------------------------------------------------------------------ push
    def _zone_gap(self) -> torch.Tensor:
        """How far the target's centre still is from the push zone's near edge along x, m ``[N]`` (0 inside)."""
        return (PUSH_ZONE_X_M[0] - self.cube_pos[:, 0]).clamp_min(0.0)

    def _lane_offset(self) -> torch.Tensor:
        """How far the target's centre is across the table from where it started, m ``[N]``."""
        return (self.cube_pos[:, 1] - self._start_y).abs()

    def _in_zone(self) -> torch.Tensor:
        """The target rests in the push zone, in its lane ``[N]`` (bool; the push skill's success, see the module
        docstring)."""
        inside = (self.cube_pos[:, 0] >= PUSH_ZONE_X_M[0]) & (self.cube_pos[:, 0] <= PUSH_ZONE_X_M[1])
        in_lane = self._lane_offset() <= PUSH_LANE_M
        return inside & in_lane & (self._height() < self.cfg.lifted_height)

    def reward_names(self) -> list[str]:
        """``panda-lift``'s terms and the push skill's (see :func:`_default_rewards`)."""
        return [*super().reward_names(), "push_progress", "in_zone"]

    def _reward_terms(self, action: torch.Tensor, terminated: torch.Tensor) -> dict[str, torch.Tensor]:
        terms = super()._reward_terms(action, terminated)
        push = self._pushing().float()
        for name in ("grasp", "lifted", "lift"):
            terms[name] = terms[name] * (1.0 - push)
        terms["push_progress"] = push * rewards.tanh_kernel(self._zone_gap(), 0.2)
        terms["in_zone"] = push * self._in_zone().float()
        return terms

    def _success(self) -> torch.Tensor:
        return torch.where(self._pushing(), self._in_zone() & ~self._terminated(), super()._success())

    def _episode_metrics(self) -> dict[str, torch.Tensor]:
        """``panda-lift``'s, plus which instruction the episode gave, which colour the target had and which skill
        was asked for (per-instruction success tables read them), and where a push left the target: short of the
        zone (``zone_gap``, m) and off its lane (``lane_offset``, m)."""
        return {
            **super()._episode_metrics(),
            "closest_approach": self.closest,
            "instruction": self.instruction_ids().float(),
            "target_colour": self.colour[:, 0].float(),
            "skill": self.skill.float(),
            "zone_gap": self._zone_gap(),
            "lane_offset": self._lane_offset(),
        }

    def drawn_geom_rgba(self) -> dict[int, torch.Tensor]:
        """Per-world colours a camera must draw (:mod:`sim.rendering`): the target's and the distractors' RGBA
        ``[N, 4]`` each."""
        return {g: self._rgba[self.colour[:, i]] for i, g in enumerate(self._geoms)}

    def _task_measurements(self, world: int) -> list[Measurement]:
        """A colour tracker's estimate of each cube (``object_pose/<colour>``, as the policy sees it in training:
        delayed, noisy, biased while the randomisation is on; position only), and the operator's instruction."""
        seen = self.last_signals["objects_pos"][world].detach().cpu().numpy().reshape(len(COLOURS), 3)
        poses = [Pose(f"object_pose/{c}", p, np.eye(3), self.BASE_FRAME) for c, p in zip(COLOURS, seen, strict=True)]
        text = self.instructions[int(self.instruction_ids()[world])]
        return [*poses, Instruction("instruction", text)]

    def contract_extra(self) -> dict[str, object]:
        """``panda-lift``'s facts plus the colours and the instructions."""
        return {
            **super().contract_extra(),
            "object": "three 0.05 m cubes; object_positions: their centres (red, green, blue) in the base frame "
            f"from a colour tracker, {self.object_delay} control period(s) old",
            "colours_rgb": {k: list(v) for k, v in COLOURS.items()},
            "objects": list(COLOURS),  # object_positions, in this order: the ROS 2 node's object_pose/<name> topics
            "instructions": {"train": training_texts(self.cfg.skills)},
            "skills": list(self.cfg.skills),
            **({"push_zone_x_m": list(PUSH_ZONE_X_M)} if "push" in self.cfg.skills else {}),
        }


SPEC = TaskSpec(
    name="panda-multitask",
    config_cls=PandaMultitaskConfig,
    factory=PandaMultitask,
    backend="mujoco | mjwarp",
    description="Franka Panda lifts (or pushes) the cube (red, green or blue) a language instruction names",
    robot="panda",
    success=">= 80% of 5 s episodes end with the named cube held >= 10 cm above the table (or pushed into the zone)",
    expert="sim.tasks.panda.experts:MultitaskExpert",
)
"""The task's registration (sim/tasks/__init__.py lists it)."""
