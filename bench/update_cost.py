"""What a gradient update costs on this machine: PPO's minibatch against a TD3 update, eager against
``torch.compile``, and what each implies for the time to the hover criterion.

Why: "Learning to Fly in Seconds" (L2F, rl_tools) reaches hover with TD3 in 300,000 environment steps, one update
each (batch 256), 15x fewer env steps than our PPO. Whether an off-policy learner would win *here* depends on what an
update costs in PyTorch on this CPU, and whether ``torch.compile`` pays back its compile time. Everything is timed in
one run, on the hover task's network sizes (actor 37 -> [64, 64] -> 4 tanh; critic 38 privileged inputs), with random
data (the cost does not depend on the values):

- ``ppo``: one PPO minibatch exactly as :meth:`robot_rl.algorithms.ppo.PPO.update` runs it (Gaussian actor and value
  loss through one backward, gradient clipping, Adam step) at the shipped 8,192 samples.
- ``td3``: one TD3 update (twin critics on privileged state + action, target-policy smoothing, the actor and the
  three target networks updated every second critic step, as L2F and Fujimoto et al. 2018), at L2F's batch 256 and
  at 1,024; the replay gather from a 1 M-transition buffer is included.
- ``compiled``: the same with the loss (forward and backward) under ``torch.compile``; its first call's time is the
  compile time (with a cold inductor cache; later runs load the compiled kernels from disk).
- ``gather``: fetching one PPO minibatch from the rollout (4,096 worlds x 16 steps, 8 minibatches, 3 epochs): nine
  tensors indexed apiece (``RolloutStorage.minibatches`` before 2026-11-23) against its one-table gather now.

The last column turns the per-update time into update seconds for a whole run: PPO's 9.2 M env steps to the
criterion (docs/benchmarks.md, the identified-hardware ranges: 141 iterations of 65,536 samples, 24 minibatches
each) and L2F's 300,000 TD3 updates.

Run::

    python bench/update_cost.py              # ~2 min on 2 cores (includes two compiles)
    python bench/update_cost.py --no-compile
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from policies.nets import ActorCritic
from policies.nets.mlp import mlp
from robot_rl.algorithms.losses import gaussian_kl, surrogate_loss, value_loss
from robot_rl.bench import format_table
from robot_rl.storage import RolloutStorage

ACTOR_IN, CRITIC_IN, ACTIONS, HIDDEN = 37, 38, 4, [64, 64]
PPO_UPDATES_TO_CRITERION = round(9.2e6 / 65_536) * 24  # minibatches of 8,192 in 9.2 M steps (8 x 3 epochs each)
L2F_UPDATES = 300_000


def ppo_step(batch: int, compiled: bool) -> Callable[[], None]:
    """One PPO minibatch update on random data of ``batch`` samples."""
    m = ActorCritic(ACTOR_IN, CRITIC_IN, ACTIONS, HIDDEN, HIDDEN, "tanh", 0.15)
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    data = (
        torch.randn(batch, ACTOR_IN),
        torch.randn(batch, CRITIC_IN),
        torch.randn(batch, ACTIONS),
        torch.randn(batch),
        torch.randn(batch, ACTIONS),
        torch.full((batch, ACTIONS), 0.15),
        torch.randn(batch),
        torch.randn(batch),
        torch.randn(batch),
    )

    def loss_fn(*d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ao, co, act, old_lp, old_mean, old_std, adv, old_v, ret = d
        dist = m.distribution_normalized(ao)
        log_prob = dist.log_prob(act).sum(-1)
        entropy = dist.entropy().sum(-1).mean()
        kl = gaussian_kl(old_mean, old_std, dist.mean.detach(), dist.stddev.detach())
        surr = surrogate_loss(log_prob, old_lp, adv, 0.2)
        v_loss = value_loss(m.value_normalized(co), old_v, ret, 0.2)
        return surr + v_loss - 0.005 * entropy, torch.stack((surr.detach(), v_loss.detach(), kl))

    f = torch.compile(loss_fn) if compiled else loss_fn

    def step() -> None:
        loss, parts = f(*data)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        float(parts[2])  # PPO reads the KL every minibatch (adaptive learning rate): one sync, as in training

    return step


def td3_step(batch: int, compiled: bool, buffer_size: int = 1_000_000) -> Callable[[], None]:
    """One TD3 update (critic step every call, actor and targets every second call) on a random replay buffer."""
    actor = mlp(ACTOR_IN, HIDDEN, ACTIONS, "tanh", out_gain=0.01)
    critics = nn.ModuleList(mlp(CRITIC_IN + ACTIONS, HIDDEN, 1, "relu") for _ in range(2))
    actor_t, critics_t = copy.deepcopy(actor), copy.deepcopy(critics)
    opt_a = torch.optim.Adam(actor.parameters(), 1e-3)
    opt_c = torch.optim.Adam(critics.parameters(), 1e-3)
    width = 2 * ACTOR_IN + 2 * CRITIC_IN + ACTIONS + 2
    buf = torch.randn(buffer_size, width)
    cuts = [ACTOR_IN, CRITIC_IN, ACTIONS, 1, 1, ACTOR_IN, CRITIC_IN]

    def critic_loss(x: torch.Tensor) -> torch.Tensor:
        _, c, a, r, d, p2, c2 = torch.split(x, cuts, dim=-1)
        with torch.no_grad():
            a2 = torch.tanh(actor_t(p2)) + (0.2 * torch.randn_like(a)).clamp(-0.5, 0.5)
            x2 = torch.cat((c2, a2.clamp(-1, 1)), -1)
            y = r + 0.98 * (1 - d) * torch.min(critics_t[0](x2), critics_t[1](x2))
        xa = torch.cat((c, a), -1)
        return sum(((q(xa) - y) ** 2).mean() for q in critics)

    f = torch.compile(critic_loss) if compiled else critic_loss
    count = [0]

    def step() -> None:
        x = buf[torch.randint(0, buffer_size, (batch,))]
        loss = f(x)
        opt_c.zero_grad(set_to_none=True)
        loss.backward()
        opt_c.step()
        count[0] += 1
        if count[0] % 2 == 0:
            p, c = x[:, :ACTOR_IN], x[:, ACTOR_IN : ACTOR_IN + CRITIC_IN]
            a_loss = -critics[0](torch.cat((c, torch.tanh(actor(p))), -1)).mean()
            opt_a.zero_grad(set_to_none=True)
            a_loss.backward()
            opt_a.step()
            with torch.no_grad():
                for target, net in ((actor_t, actor), (critics_t, critics)):
                    for pt, ps in zip(target.parameters(), net.parameters(), strict=True):
                        pt.lerp_(ps, 0.005)

    return step


def gather_step(one_table: bool) -> Callable[[], None]:
    """One pass over an update's 24 minibatch gathers; ``time_step`` divides by 24 through :data:`GATHERS`."""
    s = RolloutStorage(16, 4096, ACTOR_IN, CRITIC_IN, ACTIONS, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    if one_table:

        def table_step() -> None:
            for _ in s.minibatches(8, 3, gen):
                pass

        return table_step
    flat = [s.actor_obs.flatten(0, 1), s.critic_obs.flatten(0, 1), s.actions.flatten(0, 1), s.log_prob.flatten()]
    flat += [s.mean.flatten(0, 1), s.std.flatten(0, 1), s.values.flatten(), s.advantages.flatten(), s.returns.flatten()]

    def step() -> None:
        for _ in range(3):
            perm = torch.randperm(16 * 4096, generator=gen)
            for i in range(8):
                idx = perm[i * 8192 : (i + 1) * 8192]
                [v[idx] for v in flat]

    return step


GATHERS = 24
"""Minibatches per call of :func:`gather_step`."""


def time_step(step: Callable[[], None], seconds: float) -> tuple[float, float]:
    """``(first call s, steady ms per call)``; steady state over at least ``seconds`` after 10 warm-up calls."""
    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    for _ in range(10):
        step()
    n, t = 0, time.perf_counter()
    while n < 20 or time.perf_counter() - t < seconds:
        step()
        n += 1
    return first, (time.perf_counter() - t) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="steady-state timing per cell (default: 5)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default: 2, as training)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cells = [("ppo", 8192, PPO_UPDATES_TO_CRITERION), ("td3", 256, L2F_UPDATES), ("td3", 1024, L2F_UPDATES)]
    rows: list[dict[str, Any]] = []
    for one_table in (False, True):
        _, ms = time_step(gather_step(one_table), args.seconds)
        ms /= GATHERS
        n = PPO_UPDATES_TO_CRITERION
        mode = "one table" if one_table else "nine tensors"
        row = {"update": "gather", "batch": 8192, "mode": mode, "ms per update": ms, "us per sample": ms * 1e3 / 8192}
        rows.append({**row, "updates in a run": n, "update s in a run": ms * n / 1e3})
        print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    for kind, batch, updates in cells:
        for compiled in (False,) if args.no_compile else (False, True):
            make = ppo_step if kind == "ppo" else td3_step
            first, ms = time_step(make(batch, compiled), args.seconds)
            rows.append(
                {
                    "update": kind,
                    "batch": batch,
                    "mode": "compiled" if compiled else "eager",
                    "first call s": first,
                    "ms per update": ms,
                    "us per sample": ms * 1e3 / batch,
                    "updates in a run": updates,
                    "update s in a run": ms * updates / 1e3,
                }
            )
            print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    for row in rows:  # compiled against eager of the same cell
        base = next(r for r in rows if r["update"] == row["update"] and r["batch"] == row["batch"])
        row["speed vs first"] = base["ms per update"] / row["ms per update"]
    print()
    print(format_table(rows))
    print(
        f"\nupdates in a run: PPO's minibatches to the hover criterion (9.2 M env steps), L2F's {L2F_UPDATES:,} TD3 "
        "updates.\nThe L2F run's update time alone is to be set against PPO's whole time to the criterion "
        "(docs/benchmarks.md)."
    )


if __name__ == "__main__":
    main()
