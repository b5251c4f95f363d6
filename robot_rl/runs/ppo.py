"""PPO runs (``robot-rl train``): ``runs/<task>/<timestamp>-<seed>/`` and the steps that turn its checkpoint into
artifacts.

A run folder holds ``config.yaml`` (resolved config), ``checkpoint.pt`` (the last state: what ``--resume``
continues), ``best.pt`` (the policy of the best evaluation during training, one that met the criterion before any
that did not: what evaluation and export use), ``metrics.csv``, ``tb/`` (TensorBoard), ``learning_curve.png``, and
after evaluation and export ``eval.yaml``, ``eval.png``, ``policy.onnx`` and ``contract.yaml``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

import sim
from policies.nets import ActorCritic
from policies.nets.export import export_onnx
from policies.runtime.contract import Contract
from policies.runtime.files import atomic_write_text
from robot_rl.checkpoint import CheckpointError, init_file, load_checkpoint, read_checkpoint
from robot_rl.config import TrainConfig, config_to_yaml, from_plain, load_config
from robot_rl.evaluate import (
    EVAL_SEED_OFFSET,
    EvalResult,
    PolicyFn,
    behind_tank,
    deterministic_policy,
    evaluate_env,
    make_eval_env,
    measured_latency,
    plot_evaluation,
    switched_tank,
    tank_of,
)
from robot_rl.runner import BEST, build_model
from robot_rl.runs.worlds import action_changes, check_env_overrides, observation_changes, refuse_changes
from sim.tasks.base import BatchedTask, EnvVariant
from sim.typed_config import ConfigError, load_yaml, to_dict
from sim.vec_env import Obs, TaskConfigError, VecEnv


def new_run_dir(cfg: TrainConfig) -> Path:
    """Create ``<run_root>/<task>/<YYYYmmdd-HHMMSS>-<seed>/`` and write the resolved ``config.yaml`` into it."""
    base = Path(cfg.run_root) / cfg.task
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = base / f"{stamp}-{cfg.seed}"
    k = 1
    while run_dir.exists():
        k += 1
        run_dir = base / f"{stamp}-{cfg.seed}-{k}"
    run_dir.mkdir(parents=True)
    atomic_write_text(run_dir / "config.yaml", config_to_yaml(cfg))
    return run_dir


def check_source_view(source: Path, env: VecEnv) -> None:
    """A run of another task starts one of ``env``'s task (``--init-from``) only where ``env``'s view of it is its
    actor's layout term by term and each action maps to the same command (:meth:`PPORun.act_in`, as ``collect``
    checks a teacher of another task); a run of the same task passes. The source's config is its run folder's.

    Raises:
        ConfigError: The first difference, named.
    """
    path = init_file(source)
    if read_checkpoint(path)["config"]["task"] == getattr(env, "task_name", None):
        return
    run = PPORun.load(path.parent)
    try:
        run.act_in(env)
    finally:
        run.env.close()


def differing_keys(shown: Any, saved: Any, prefix: str = "") -> list[str]:
    """Dotted keys where ``shown`` (a run folder's ``config.yaml``) and ``saved`` (its checkpoint's config) differ,
    in the order of ``saved`` and then of keys only ``shown`` has; ``[]`` when they agree."""
    if not (isinstance(shown, dict) and isinstance(saved, dict)):
        return [] if shown == saved else [prefix or "(the whole file)"]
    keys = list(saved) + [k for k in shown if k not in saved]
    out: list[str] = []
    for k in keys:
        name = f"{prefix}.{k}" if prefix else str(k)
        if k not in shown or k not in saved:
            out.append(name)
        else:
            out += differing_keys(shown[k], saved[k], name)
    return out


@dataclass
class PPORun:
    """A trained policy loaded from its run folder, with a one-world env of its task (sizes, contract)."""

    run_dir: Path
    cfg: TrainConfig
    model: ActorCritic
    checkpoint: dict[str, Any]
    env: VecEnv
    config_edits: list[str] = dataclasses.field(default_factory=list)
    env_overrides: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    """The evaluations beside the trained setting that :meth:`evaluate` could not run, each in one line (why)."""
    kind = "ppo"

    @property
    def task(self) -> str:
        """The task it was trained on."""
        return self.cfg.task

    @classmethod
    def load(cls, run_dir: Path, device: str = "cpu") -> PPORun:
        """Load a run folder's policy: ``best.pt`` if training kept one, else ``checkpoint.pt``; the configuration is
        the one saved *in the checkpoint*.

        ``config.yaml`` is the human-readable mirror: editing it changes nothing here (the keys where it differs
        from the checkpoint's config are in ``config_edits``, for the command line to say so), but a mirror that
        names another task than the checkpoint is refused (the folder was mixed up).

        Raises:
            CheckpointError: The folder is not a run folder, its checkpoint is unusable or non-finite, or it does
                not match the folder's ``config.yaml``.
            ConfigError: The saved config is invalid.
        """
        if not run_dir.exists():
            raise CheckpointError(f"run folder '{run_dir}' does not exist")
        if not run_dir.is_dir():
            raise CheckpointError(f"'{run_dir}' is a file, not a run folder")
        path = run_dir / "checkpoint.pt"
        if not path.exists():
            raise CheckpointError(f"'{run_dir}' is not a run folder (no checkpoint.pt)")
        if (run_dir / BEST).exists():
            path = run_dir / BEST
        state = read_checkpoint(path, device)
        cfg = from_plain(state["config"])
        mirror = run_dir / "config.yaml"
        edits: list[str] = []
        if mirror.is_file():
            shown = load_yaml(str(mirror))
            if shown.get("task") != cfg.task:
                raise CheckpointError(
                    f"'{path}' holds a '{cfg.task}' policy, but the folder's config.yaml is for task "
                    f"'{shown.get('task')}'"
                )
            edits = differing_keys(shown, state["config"])
        cfg.device = device
        env = sim.make(cfg.task, 1, device, cfg.env)
        model = build_model(cfg, env).to(device)
        load_checkpoint(path, model, None, device)
        model.eval()
        return cls(run_dir, cfg, model, state, env, edits)

    def set_env(self, overrides: list[str]) -> None:
        """Evaluate in another world: apply ``env.KEY=VALUE`` overrides to the saved config (the policy stays as
        trained), e.g. ``env.noise.bias_std.object_pos=0.005`` or ``env.passivity.tank_max_j=10``.

        Raises:
            ConfigError: A key outside ``env``, an unknown key or a bad value (named), or a setting that changes what
                the policy reads or commands (the sizes of its observation groups, its action count, or how its
                actions map to commands: the contract's action section).
        """
        check_env_overrides(overrides)
        cfg = load_config(None, None, overrides, base=to_dict(self.cfg), base_name=f"the config of '{self.run_dir}'")
        env = sim.make(cfg.task, 1, cfg.device, cfg.env)
        try:
            changed = self.interface_changes(env)
        finally:
            env.close()
        refuse_changes(overrides, changed, "the policy")
        self.cfg.env = cfg.env
        self.env_overrides += overrides

    def interface_changes(self, env: VecEnv) -> list[str]:
        """How ``env`` (the task in another world) differs from the trained one in what the policy reads or commands,
        one phrase each (``observation 'critic' 93 -> 92``, ``the action's scale``); ``[]``: the same interface."""
        groups = self.cfg.policy.actor_obs
        before = [self.env.obs_sizes[g] for g in groups] + [self.env.num_actions]
        after = [env.obs_sizes.get(g) for g in groups] + [env.num_actions]
        names = [f"observation '{g}'" for g in groups] + ["actions"]
        changed = [f"{n} {b} -> {a}" for n, b, a in zip(names, before, after, strict=True) if a != b]
        return changed or self.action_changes(env)

    def action_changes(self, env: VecEnv) -> list[str]:
        """Which fields of the contract's action section ``env`` maps otherwise than the trained world (``the
        action's scale``); ``[]``: each action maps to the same command. Built on the onboard group whatever the
        actor reads (a privileged actor's contract is refused), so ``env`` may be another task's."""
        return action_changes(self.env.contract(["policy"]), env.contract(["policy"]))

    def act_in(self, env: VecEnv) -> list[str]:
        """The observation groups the actor reads in ``env``: its own in its task's worlds; in another task's, the
        view that task gives of this one (:meth:`~sim.tasks.base.BatchedTask.add_task_view`, added to ``env`` here;
        e.g. a ``panda-lift`` teacher in ``panda-multitask``), refused unless it is the trained layout term by term
        and each action maps to the same command (the commands after them held by the task: :meth:`policy_in`).

        Raises:
            ConfigError: In another task: the task gives no view of this one, the actor reads a privileged group, or
                a term or the action mapping differs (the first difference named).
        """
        if not isinstance(env, BatchedTask) or env.task_name == self.task:  # every task's worlds are BatchedTasks
            return self.cfg.policy.actor_obs
        where = f"teacher '{self.run_dir}' ({self.task})"
        if self.cfg.policy.actor_obs != ["policy"]:
            raise ConfigError(
                f"{where} reads {self.cfg.policy.actor_obs}; only an onboard ('policy') actor acts in another task"
            )
        try:
            given = env.add_task_view(self.task)
        except TaskConfigError as exc:
            raise ConfigError(f"{where} cannot act in {env.task_name}: {exc}") from None
        layout = observation_changes(self.env.contract(["policy"]).observation, given)
        if layout:
            raise ConfigError(f"{where} reads otherwise than {env.task_name} gives it ({layout[0]})")
        differ = action_changes(self.env.contract(["policy"]), env.contract(["policy"]), len(env.task_view_held(self.task)))
        if differ:
            raise ConfigError(
                f"{where} commands the robot otherwise than {env.task_name} in this world ({', '.join(differ)}); set "
                "the env key that maps them with --set"
            )
        return [self.task]

    def policy_in(self, env: VecEnv, groups: list[str]) -> PolicyFn:
        """The deterministic actor acting in ``env`` on ``groups`` (what :meth:`act_in` returned for ``env``): its
        actions, then the commands another task holds for it (:meth:`~sim.tasks.base.BatchedTask.task_view_held`: a
        ``panda-push`` teacher's closed gripper in ``panda-multitask``)."""
        act = deterministic_policy(self.model, groups)
        held = env.task_view_held(self.task) if isinstance(env, BatchedTask) and env.task_name != self.task else []
        if not held:
            return act

        fill = torch.tensor(held, device=next(self.model.parameters()).device)  # [k], built once

        def padded(obs: Obs) -> torch.Tensor:
            action = act(obs)
            return torch.cat((action, fill.to(action.dtype).expand(action.shape[0], -1)), 1)

        return padded

    def contract(self) -> Contract:
        """The deployment contract of the actor (what export writes into ``policy.onnx``)."""
        return self.env.contract(self.cfg.policy.actor_obs)

    def export(self, out_dir: Path | None = None) -> Path:
        """Export the actor to ``policy.onnx`` (+ ``contract.yaml``) in ``out_dir`` (default: the run folder).

        Raises:
            ContractError: The contract does not fit the model (nothing is written, no folder is made).
        """
        return export_onnx(self.model, self.contract(), out_dir or self.run_dir)

    def evaluate(
        self, episodes: int, settings: tuple[bool, ...] = (True, False), stem: str = "eval", beside: bool = True
    ) -> list[EvalResult]:
        """Evaluate the policy (in ``cfg.env``) with randomisation on and/or off, and, unless ``beside`` is false,
        with randomisation on in the settings a user needs beside the trained one: for tasks with an energy tank in
        the loop the tank the other way round (:func:`switched_tank`), and for tasks whose robot has a measured
        latency that latency in place of the trained one (:func:`measured_latency`); writes ``<stem>.yaml`` and
        ``<stem>.png`` into the run folder."""
        cfg, device = self.cfg, torch.device(self.cfg.device)
        policy = deterministic_policy(self.model, cfg.policy.actor_obs)
        results: list[EvalResult] = []
        other, variant = None, None
        for randomize in settings:
            env = make_eval_env(cfg.task, cfg.env, episodes, device, randomize)
            result = evaluate_env(env, policy, seed=cfg.seed + EVAL_SEED_OFFSET)
            results.append(dataclasses.replace(result, tank_j=tank_of(cfg.env)))
            other = other or (switched_tank(cfg.env, env) if beside else None)
            variant = variant or (measured_latency(env) if beside else None)
            env.close()
        extra = [EnvVariant(other, "", "")] if other is not None else []  # the tank: its own words
        extra += [variant] if variant is not None else []
        self.skipped = []
        for v in extra:
            env = make_eval_env(cfg.task, v.cfg, episodes, device, True)
            changed = self.interface_changes(env)
            if changed:  # e.g. a privileged actor: it reads the critic's state, whose layout holds the tank's level
                t = tank_of(v.cfg)
                words = v.words or (behind_tank(t) if t is not None else "without the tank")
                self.skipped.append(f"not evaluated {words}: there the policy's interface changes ({', '.join(changed)})")
                env.close()
                continue
            result = evaluate_env(env, policy, seed=cfg.seed + EVAL_SEED_OFFSET)
            results.append(dataclasses.replace(result, tank_j=tank_of(v.cfg), variant=v.words, variant_key=v.key))
            env.close()
        summary: dict[str, Any] = {"env_overrides": self.env_overrides} if self.env_overrides else {}
        summary.update({r.key: r.summary() for r in results})
        if self.skipped:
            summary["skipped"] = list(self.skipped)
        atomic_write_text(self.run_dir / f"{stem}.yaml", yaml.safe_dump(summary, sort_keys=False))
        rate = f", {1.0 / cfg.env.dt:g} Hz control" if stem != "eval" else ""
        rate += "".join(f", {o}" for o in self.env_overrides)
        plot_evaluation(results, self.run_dir / f"{stem}.png", f"{cfg.task}: {episodes} episodes per setting{rate}")
        return results

    def describe(self) -> str:
        """One line: what the run is."""
        c = self.checkpoint
        steps = int(c.get("env_steps", 0))
        best = " (the best of its evaluations during training)" if "selection" in c else ""
        return f"{self.cfg.task}: PPO, {int(c.get('iteration', 0)):,} iterations, {steps:,} env steps{best}"
