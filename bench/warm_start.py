"""Does a behaviour-cloning warm start from the scripted expert give the PPO teacher of a cube task a head start?

An exploration for the manipulation teachers (issue 30), not a training mode of the product. Per variant:

1. the task's scripted expert (``sim.tasks.panda.experts``, exact cube) drives the *training* env for
   ``--collect-steps`` control periods with DART-style Gaussian noise of ``--dart-noise`` on the executed action;
   the actor observations it saw and the expert's (noise-free) actions are recorded, and the actor normaliser is
   fitted on them;
2. the actor mean is regressed on them (MSE, Adam 1e-3, ``--epochs`` epochs of 2,048-sample minibatches); with
   ``critic`` in the variant the critic is fitted to the discounted returns of the same rollout at the same time;
3. the policy std is set to the variant's ``std`` and PPO trains from there with the task's shipped config
   (``--max-time`` seconds, evaluations as configured); ``freeze`` keeps the actor normaliser's statistics fixed
   during PPO (the BC policy was fitted with them);
4. with ``bc=C[,decay=D]`` in the variant, PPO's minibatch loss keeps a demonstration term that decays as DAPG's
   does: ``C D^k`` times the squared error of the actor mean on a random minibatch of the recorded expert actions
   (``k``: PPO iterations so far);
5. with ``warmup=N`` in the variant, the first ``N`` PPO iterations train the critic alone on the cloned policy's
   own rollouts (PIRLNav's critic-only phase: the actor, its std and the learning rate stay as they are), so the
   first actor updates follow advantages of a critic that knows the policy it judges.

It prints the held-out success after the warm start and every periodic evaluation of PPO after it (selection seeds).

Run::

    python bench/warm_start.py --task panda-push --max-time 540 --variants std=0.2,critic std=0.2,critic,freeze
    python bench/warm_start.py --variants std=0.2,critic,freeze --set ppo.schedule=fixed --set ppo.learning_rate=1e-4
    python bench/warm_start.py --task panda-lift --max-time 600 --variants std=0.3,critic,freeze,bc=0.5,decay=0.99
    python bench/warm_start.py --max-time 300 --variants std=0.2,critic,freeze,warmup=20
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch

import sim
from policies.nets import ActorCritic
from robot_rl.algorithms.losses import gae, value_loss
from robot_rl.algorithms.ppo import UpdateStats
from robot_rl.bench import format_table
from robot_rl.config import load_config
from robot_rl.evaluate import SELECTION_SEED_OFFSET, EvalResult, pick
from robot_rl.runner import OnPolicyRunner
from robot_rl.storage import Batch


def clone_error(model: ActorCritic, actor_obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the actor mean on raw actor observations ``[B, D_a]`` against expert actions ``[B, A]``."""
    return (model.action_mean(actor_obs) - actions).square().mean()


def warm_start(
    runner: OnPolicyRunner, collect_steps: int, dart_noise: float, epochs: int, critic: bool
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Steps 1 and 2 of the module docstring on ``runner``'s env and model; returns the final BC loss and the
    demonstrations (raw actor observations ``[M, D_a]``, expert actions ``[M, A]``)."""
    env, model, p, gamma = runner.env, runner.model, runner.cfg.policy, runner.cfg.ppo.gamma
    expert = sim.get_task(runner.cfg.task).expert_cls()(env)
    obs = env.reset(seed=runner.cfg.seed + 7)
    expert.reset()
    actor_in, critic_in, actions, rewards, done = [], [], [], [], []
    for _ in range(collect_steps):
        a = expert.act()
        ao, co = pick(obs, p.actor_obs), pick(obs, p.critic_obs)
        model.update_normalizers(ao, co)
        actor_in.append(ao)
        critic_in.append(co)
        actions.append(a)
        obs, r, terminated, truncated, _ = env.step((a + dart_noise * torch.randn_like(a)).clamp(-1.0, 1.0))
        finished = terminated | truncated
        rewards.append(r)
        done.append(finished.float())
        if bool(finished.any()):
            expert.reset(finished)
    r_all, d_all, zeros = torch.stack(rewards), torch.stack(done), torch.zeros(len(rewards), env.num_envs)
    _, returns = gae(r_all, zeros, zeros, d_all, d_all, gamma, 1.0)  # discounted returns to go; 0 past the rollout
    x, y = torch.cat(actor_in), torch.cat(actions)
    xc, yc = torch.cat(critic_in), returns.reshape(-1)
    params = [*model.actor.parameters(), *(model.critic.parameters() if critic else [])]
    opt = torch.optim.Adam(params, lr=1e-3)
    loss = torch.zeros(())
    for _ in range(epochs):
        for idx in torch.randperm(x.shape[0]).split(2048):
            loss = clone_error(model, x[idx], y[idx])
            total = loss + ((model.value(xc[idx]) - yc[idx]).square().mean() if critic else 0.0)
            opt.zero_grad()
            total.backward()
            opt.step()
    return float(loss.detach()), x, y


def add_bc_term(runner: OnPolicyRunner, x: torch.Tensor, y: torch.Tensor, coef: float, decay: float) -> None:
    """Step 4 (variant ``bc=C[,decay=D]``): PPO's minibatch loss gains ``C D^k`` times the squared error of the
    actor mean on a random minibatch of the demonstrations (``k``: PPO iterations so far), as DAPG's decaying
    demonstration term."""
    ppo, model = runner.ppo, runner.model
    real, real_update = ppo._loss_fn, ppo.update
    weight = [coef]

    def loss_fn(b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, parts, dev = real(b)
        idx = torch.randint(0, x.shape[0], (b.actions.shape[0],), device=x.device)
        return loss + weight[0] * clone_error(model, x[idx], y[idx]), parts, dev

    def update() -> UpdateStats:
        stats = real_update()
        weight[0] *= decay
        return stats

    ppo._loss_fn = loss_fn
    ppo.update = update  # type: ignore[method-assign]


def add_critic_warmup(runner: OnPolicyRunner, iterations: int) -> None:
    """Step 5 (variant ``warmup=N``): for the first ``iterations`` PPO updates the minibatch loss is the value loss
    alone and the adaptive learning rate is held (the KL of an actor that does not move would raise it)."""
    ppo, model, cfg = runner.ppo, runner.model, runner.ppo.cfg
    real_loss, real_update, real_adapt = ppo._loss_fn, ppo.update, ppo._adapt_learning_rate
    done = [0]

    def loss_fn(b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, parts, dev = real_loss(b)
        if done[0] >= iterations:
            return loss, parts, dev
        v_loss = value_loss(model.value_normalized(b.critic_obs), b.old_values, b.returns, cfg.value_clip)
        return cfg.value_loss_coef * v_loss, parts, dev

    def adapt(kl: float) -> None:
        if done[0] >= iterations:
            real_adapt(kl)

    def update() -> UpdateStats:
        stats = real_update()
        done[0] += 1
        return stats

    ppo._loss_fn = loss_fn
    ppo._adapt_learning_rate = adapt  # type: ignore[method-assign]
    ppo.update = update  # type: ignore[method-assign]


def run_variant(args: argparse.Namespace, variant: str, root: Path) -> dict[str, object]:
    """One variant (``std=S[,critic][,freeze][,bc=C[,decay=D]][,warmup=N]``): warm start, then PPO; one row of
    figures."""
    opts = {key: value for key, _, value in (o.partition("=") for o in variant.split(","))}
    cfg = load_config(args.task, None, [*args.overrides, f"runner.max_time_s={args.max_time}", f"run_root={root}"])
    run_dir = root / variant.replace(",", "_").replace("=", "")
    run_dir.mkdir(parents=True)
    runner = OnPolicyRunner(cfg, run_dir, quiet=True)
    t0 = time.monotonic()
    bc_loss, demo_x, demo_y = warm_start(runner, args.collect_steps, args.dart_noise, args.epochs, "critic" in opts)
    if "bc" in opts:
        add_bc_term(runner, demo_x, demo_y, float(opts["bc"]), float(opts.get("decay", 1.0)))
    if "warmup" in opts:
        add_critic_warmup(runner, int(opts["warmup"]))
    with torch.no_grad():
        runner.model.log_std.fill_(math.log(float(opts.get("std", cfg.policy.init_noise_std))))
    warm_s = time.monotonic() - t0
    after_bc = float(runner.evaluate(randomize=True).summary()["success_rate"])
    print(f"{variant}: warm start {warm_s:.0f} s, BC loss {bc_loss:.4f}, after BC {after_bc:.1%}", flush=True)
    if "freeze" in opts:
        runner.model.actor_normalizer.update = lambda *a, **k: None  # type: ignore[method-assign]
    evals: list[str] = []
    real = runner.evaluate

    def logged(
        randomize: bool = True, episodes: int | None = None, seed_offset: int = SELECTION_SEED_OFFSET
    ) -> EvalResult:
        result = real(randomize, episodes, seed_offset)
        evals.append(f"{result.summary()['success_rate']:.0%}")
        print(f"{variant}: iteration {runner.iteration}, {time.monotonic() - t0:.0f} s: {evals[-1]}", flush=True)
        return result

    runner.evaluate = logged  # type: ignore[method-assign]
    result = runner.train()
    runner.evaluate = real  # type: ignore[method-assign]
    final = float(runner.evaluate(randomize=True).summary()["success_rate"])
    return {
        "variant": variant,
        "warm start s": warm_s,
        "BC loss": bc_loss,
        "after BC (held-out)": f"{after_bc:.1%}",
        "PPO evaluations (selection seeds)": " ".join(evals),
        "PPO s": result.wall_time_s,
        "last policy (held-out)": f"{final:.1%}",
    }


def main() -> None:
    """Run the variants one after the other and print one table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="panda-push")
    p.add_argument("--variants", nargs="+", default=["std=0.2,critic", "std=0.2,critic,freeze"])
    p.add_argument("--collect-steps", type=int, default=250, help="control periods of expert rollout")
    p.add_argument("--dart-noise", type=float, default=0.1, help="std of the noise on the executed expert action")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--max-time", type=float, default=540.0, help="PPO seconds per variant after the warm start")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", dest="overrides", action="append", default=["compile=false"], help="config override")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="robot-rl-warm-") as tmp:
        rows = [run_variant(args, v, Path(tmp)) for v in args.variants]
    print(format_table(rows))


if __name__ == "__main__":
    main()
