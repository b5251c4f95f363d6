"""Run by ``torchrun`` from test_distributed.py (not a test module): one rank of a tiny data-parallel training.

Modes:
    train TASK OUT [refine]
                        a few PPO iterations; records every rank's parameters after every update and the raw actor
                        observations its normaliser saw, into OUT/rank<r>.pt; with ``refine``, rank 0's first
                        evaluation "meets the criterion" (ppo.refine_kl then applies) and each rank's KL target is saved
    first-update OUT    one PPO update on synthetic rollout data split by worlds; writes OUT/update-<world>-<r>.pt
                        (run with 1 process and with 2 to compare)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from robot_rl.algorithms.ppo import PPO
from robot_rl.config import load_config
from robot_rl.distributed import exit_rank, from_environment
from robot_rl.runner import OnPolicyRunner

SMALL = [
    "num_envs=32", "ppo.num_steps=4", "ppo.num_epochs=2", "ppo.num_minibatches=2", "runner.eval_interval=0",
    "runner.save_interval=1000", "env.episode_length_s=0.5", "runner.max_iterations=3",
]  # fmt: skip


def train(task: str, out: Path, refine: bool = False) -> None:
    extra = ["runner.eval_interval=1", "runner.stop_on_success=false", "ppo.refine_kl=0.0001"] if refine else []
    cfg = load_config(task, None, [*SMALL, *extra])
    role, device = from_environment(cfg.device)
    runner = OnPolicyRunner(cfg, out, quiet=True, dist=role, device=device)
    if refine:
        real = runner.evaluate

        def met(*args: object, **kwargs: object) -> object:
            result = real(*args, **kwargs)  # type: ignore[arg-type]
            result.met = True
            return result

        runner.evaluate = met  # type: ignore[method-assign,assignment]
    params: list[torch.Tensor] = []
    seen: list[torch.Tensor] = []
    update, norm = PPO.update, runner.model.actor_normalizer.update

    def recording_update(self: PPO) -> object:
        stats = update(self)
        params.append(torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).clone())
        return stats

    def recording_norm(x: torch.Tensor, merge: object = None) -> None:
        seen.append(x.clone())
        norm(x, merge)  # type: ignore[arg-type]

    PPO.update = recording_update  # type: ignore[method-assign]
    runner.model.actor_normalizer.update = recording_norm  # type: ignore[method-assign]
    (out / "run").mkdir(parents=True, exist_ok=True)
    runner.run_dir = out / "run"
    runner.train()
    n = runner.model.actor_normalizer
    torch.save(
        {
            "params": params,
            "seen": torch.cat(seen),
            "mean": n.mean.clone(),
            "var": n.var.clone(),
            "count": n.count,
            "desired_kl": runner.ppo.desired_kl,
        },
        out / f"rank{role.rank}.pt",
    )
    role.close()


def first_update(out: Path) -> None:
    cfg = load_config("quadrotor-hover", None, SMALL)
    role, device = from_environment(cfg.device)
    t, n_all, d_a, d_c, a = 4, 8, 6, 7, 4
    g = torch.Generator().manual_seed(0)
    data = {
        "actor_obs": torch.randn(t, n_all, d_a, generator=g), "critic_obs": torch.randn(t, n_all, d_c, generator=g),
        "rewards": torch.randn(t, n_all, generator=g), "noise": torch.randn(t, n_all, a, generator=g),
        "last": torch.randn(n_all, d_c, generator=g),
    }  # fmt: skip
    local = n_all // role.world_size
    lo, hi = role.rank * local, (role.rank + 1) * local
    from policies.nets import ActorCritic

    torch.manual_seed(3)
    model = ActorCritic(d_a, d_c, a, (16,), (16,), "tanh", 0.5)
    ppo = PPO(model, cfg.ppo, local, torch.device(device), seed=0, dist=role)
    s = ppo.storage
    for step in range(t):
        model.update_normalizers(data["actor_obs"][step, lo:hi], data["critic_obs"][step, lo:hi], role.merge_moments)
        actor_in = model.actor_normalizer(data["actor_obs"][step, lo:hi])
        critic_in = model.critic_normalizer(data["critic_obs"][step, lo:hi])
        dist = model.distribution_normalized(actor_in)
        with torch.no_grad():
            actions = dist.mean + dist.stddev * data["noise"][step, lo:hi]
            s.actor_obs[step], s.critic_obs[step], s.actions[step] = actor_in, critic_in, actions
            s.mean[step], s.std[step] = dist.mean, dist.stddev
            s.log_prob[step] = dist.log_prob(actions).sum(-1)
            s.values[step] = model.value_normalized(critic_in)
        terminated = torch.zeros(hi - lo, dtype=torch.bool)
        s.step = step
        ppo.record(data["rewards"][step, lo:hi], terminated, terminated, None)
    ppo.compute_returns(data["last"][lo:hi])
    if role.world_size == 1:  # minibatch i = the union of what 2 ranks would each draw as their minibatch i
        ppo.storage.minibatches = union_minibatches(ppo, cfg.ppo.num_minibatches, cfg.ppo.num_epochs)  # type: ignore
    ppo.update()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    torch.save(
        {"params": flat, "mean": model.actor_normalizer.mean.clone()}, out / f"update-{role.world_size}-{role.rank}.pt"
    )
    role.close()


def union_minibatches(ppo: PPO, num_minibatches: int, num_epochs: int):  # type: ignore[no-untyped-def]
    """Single process, 8 worlds: minibatch i is the union of minibatch i of rank 0 (worlds 0-3) and rank 1 (4-7),
    both drawn from the shared shuffling stream over their own T x 4 samples, as the 2-rank job does."""
    from robot_rl.storage import Batch

    s = ppo.storage
    t, n = s.num_steps, s.num_envs
    half = n // 2
    flat = {
        "actor_obs": s.actor_obs, "critic_obs": s.critic_obs, "actions": s.actions, "old_log_prob": s.log_prob,
        "old_mean": s.mean, "old_std": s.std, "old_values": s.values, "advantages": s.advantages, "returns": s.returns,
    }  # fmt: skip
    gen = ppo.shuffle_gen
    size = t * half // num_minibatches

    def gen_batches():  # type: ignore[no-untyped-def]
        for _ in range(num_epochs):
            perm = torch.randperm(t * half, generator=gen)
            for i in range(num_minibatches):
                local = perm[i * size : (i + 1) * size]
                steps, worlds = local // half, local % half
                idx_t = torch.cat((steps, steps))
                idx_n = torch.cat((worlds, worlds + half))
                yield Batch(**{k: v[idx_t, idx_n] for k, v in flat.items()})

    return lambda *args, **kwargs: gen_batches()


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "train":
        train(sys.argv[2], Path(sys.argv[3]), refine=sys.argv[4:] == ["refine"])
    else:
        first_update(Path(sys.argv[2]))
    exit_rank(0)  # as robot-rl does: the interpreter's teardown aborts a finished rank now and then
