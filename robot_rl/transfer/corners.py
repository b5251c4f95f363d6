"""Corners of the randomisation: parameters pinned at an edge of their training range, the others randomised as trained.

A policy's average over the training ranges can hide the combination it fails on (the quadrotor's quickest rotors on
its lightest airframe). ``robot-rl eval RUN --corner SPEC`` evaluates the run's policy on held-out seeds with the
named parameters pinned:

- ``--corner mass=hi,action_latency=hi``: each named parameter at the low (``lo``) or high (``hi``) edge of the
  range it trained over, in every world; every other randomisation term as trained.
- ``--corner worst``: a greedy search for the worst corner. Every randomised parameter at each edge on its own
  (``2 P`` evaluations); then, from the worst of those, forward selection: every other parameter at each edge is
  added to the worst corner so far and the worst combination kept, until ``--corner-depth`` parameters are pinned
  (``2 (P - 1) + 2 (P - 2) + ...`` evaluations more). "Worst" is the lowest ranking score of the task
  (:meth:`sim.vec_env.VecEnv.quality`: the success rate, or the quadrotor's tail error with crashes counted at
  10 cm). A greedy search finds a bad corner, not provably the worst one: a corner whose parameters do little alone
  and much together can stay unfound (name it with ``--corner P=EDGE,...``). ``--corner-beam B`` keeps the ``B``
  worst corners at each size instead of one and grows each of them (each set of edges evaluated once): about ``B``
  times the evaluations, a firmer bound (on a corner-trained quadrotor the greedy search reported 61.7 % success in
  its worst corner where a corner it missed gave 45.7 %).

The high edge of a uniform term is the largest value its draws can take (they are in ``[lo, hi)``): for the action
latency of ``[0, 2)`` control periods, which the task floors, that is 1 period, not 2.

The run folder gets ``corner_<PARAM>-<EDGE>[_...].yaml`` for one corner, or ``corners.yaml`` and ``corners.png`` for
the search (one row per setting: its figures, its score, whether it meets the criterion and the quality bar), with a
bar chart of the settings' success rates.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import dataclass

import torch
import yaml

from policies.runtime.files import atomic_write_text
from policies.runtime.text import printable
from robot_rl.evaluate import EVAL_SEED_OFFSET, EvalResult, deterministic_policy, evaluate_env, make_eval_env
from robot_rl.logger import save_png
from robot_rl.runs.ppo import PPORun
from sim.randomization import RandomizationTerm, edge_value, sample_bounds
from sim.typed_config import ConfigError

EDGES = ("lo", "hi")
"""The two edges of a training range."""
WORST = "worst"
"""``--corner worst``: search for the worst corner (see the module docstring)."""
DEFAULT_DEPTH = 3
"""Parameters ``--corner worst`` pins together unless ``--corner-depth`` says otherwise."""
MAX_DEPTH = 8
"""Most parameters ``--corner worst`` pins together."""
MAX_BEAM = 8
"""Most corners ``--corner worst`` grows at each size (``--corner-beam``)."""
MAX_STEM = 120
"""Longest file name stem of a single corner's evaluation, characters."""


class CornerError(ConfigError):
    """A ``--corner`` specification is malformed or names a parameter the run did not randomise."""


@dataclass(frozen=True)
class Corner:
    """Parameters pinned at an edge of their training range: ``((param, "lo" | "hi"), ...)``, in the given order."""

    edges: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> Corner:
        """Read ``PARAM=EDGE[,PARAM=EDGE...]`` with ``EDGE`` one of :data:`EDGES`; the message says what is wrong."""
        edges: list[tuple[str, str]] = []
        for part in text.split(","):
            name, eq, edge = part.strip().partition("=")
            if not eq or not name or edge not in EDGES:
                raise CornerError(
                    f"--corner must look like PARAM=lo|hi[,PARAM=lo|hi...] or '{WORST}' "
                    f"(e.g. mass=hi,action_latency=hi), got '{printable(text)}'"
                )
            if any(name == seen for seen, _ in edges):
                raise CornerError(f"--corner names '{printable(name)}' twice")
            edges.append((name, edge))
        return cls(tuple(edges))

    @property
    def name(self) -> str:
        """The corner as ``--corner`` takes it: ``mass=hi,action_latency=hi``."""
        return ",".join(f"{p}={e}" for p, e in self.edges)

    @property
    def stem(self) -> str:
        """File name stem of a single corner's evaluation: ``corner_mass-hi_action_latency-hi`` (a hash of that
        where it would be longer than :data:`MAX_STEM` characters; the file holds the corner's name)."""
        stem = "corner_" + "_".join(f"{p}-{e}" for p, e in self.edges)
        return stem if len(stem) <= MAX_STEM else f"corner_{hashlib.sha1(stem.encode()).hexdigest()[:12]}"


def randomised_params(terms: list[RandomizationTerm]) -> list[str]:
    """Parameters whose training range has two distinct edges, in the config's order (each once)."""
    out: list[str] = []
    for term in terms:
        lo, hi = sample_bounds(term)
        if hi > lo and term.param not in out:
            out.append(term.param)
    return out


def pin_terms(terms: list[RandomizationTerm], corner: Corner) -> list[RandomizationTerm]:
    """The randomisation of ``corner``: every term of a named parameter fixed at its edge (same operation, timing
    and elements), the other terms as they are.

    Raises:
        CornerError: A named parameter was not randomised over a range in training.
    """
    have = randomised_params(terms)
    for param, _ in corner.edges:
        if param not in have:
            raise CornerError(
                f"--corner: '{printable(param)}' was not randomised over a range in this run; "
                f"randomised: {', '.join(have) or 'nothing'}"
            )
    edges = dict(corner.edges)
    out = []
    for term in terms:
        if term.param in edges:
            value = edge_value(term, edges[term.param])
            term = dataclasses.replace(term, distribution="uniform", range=(value, value), clip=None)
        out.append(term)
    return out


def evaluate_corner(run: PPORun, corner: Corner, episodes: int) -> EvalResult:
    """The run's policy on ``episodes`` held-out episodes at ``corner`` (the run's own tank, if it trained with one)."""
    cfg = run.cfg
    env_cfg = copy.deepcopy(cfg.env)
    env_cfg.randomization = pin_terms(list(env_cfg.randomization), corner)
    env = make_eval_env(cfg.task, env_cfg, episodes, torch.device(cfg.device), randomize=True)
    policy = deterministic_policy(run.model, cfg.policy.actor_obs)
    try:
        return evaluate_env(env, policy, seed=cfg.seed + EVAL_SEED_OFFSET)
    finally:
        env.close()


def row(label: str, result: EvalResult) -> dict[str, float | str | bool]:
    """One setting's line of ``corners.yaml``: its name, the evaluation's numbers and the task's score."""
    numbers = {k: v for k, v in result.summary().items() if k != "randomization"}
    return {"corner": label, **numbers, "score": result.score}


def search_worst(run: PPORun, episodes: int, depth: int, beam: int = 1) -> list[dict[str, float | str | bool]]:
    """``--corner worst``: every randomised parameter at each edge alone, then forward selection: each of the
    ``beam`` worst corners so far grows by every other parameter at each edge, and the ``beam`` worst of those are
    kept, until ``depth`` parameters are pinned (see the module docstring; a set of edges reached twice is evaluated
    once). Rows in the order evaluated, the first one the policy with everything randomised as trained."""
    params = randomised_params(list(run.cfg.env.randomization))
    if not params:
        raise CornerError(f"--corner {WORST}: run '{run.run_dir}' trained without randomisation; there is no corner")
    rows = [row("as trained", evaluate_corner(run, Corner(()), episodes))]

    seen: set[frozenset[tuple[str, str]]] = set()

    def worst_of(candidates: list[Corner]) -> list[Corner]:
        scored: list[tuple[float, int, Corner]] = []
        for corner in candidates:
            if frozenset(corner.edges) in seen:
                continue
            seen.add(frozenset(corner.edges))
            result = evaluate_corner(run, corner, episodes)
            rows.append(row(corner.name, result))
            scored.append((result.score, len(scored), corner))
        return [corner for _, _, corner in sorted(scored)[:beam]]

    frontier = worst_of([Corner(((p, e),)) for p in params for e in EDGES])
    for _ in range(min(depth, len(params)) - 1):
        frontier = worst_of(
            [
                Corner((*c.edges, (p, e)))
                for c in frontier
                for p in params
                if p not in {q for q, _ in c.edges}
                for e in EDGES
            ]
        )
    return rows


def write_search(run: PPORun, rows: list[dict[str, float | str | bool]], episodes: int) -> None:
    """``corners.yaml`` and ``corners.png`` (each setting's success rate, ordered by the task's score, worst at the
    bottom) in the run folder."""
    summary = {"episodes": episodes, "rows": rows}
    atomic_write_text(run.run_dir / "corners.yaml", yaml.safe_dump(summary, sort_keys=False))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(rows, key=lambda r: -float(r["score"]))
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(ordered) + 1.5))
    colours = ["tab:green" if r["criterion_met"] else "tab:red" for r in ordered]
    ax.barh(range(len(ordered)), [float(r["success_rate"]) for r in ordered], color=colours)
    ax.set_yticks(range(len(ordered)), [str(r["corner"]) for r in ordered], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("episodes that succeed (ordered by the task's score, worst at the bottom; red: criterion not met)")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(f"{run.cfg.task}: corners of the randomisation, {episodes} held-out episodes each", fontsize=9)
    fig.tight_layout()
    save_png(fig, run.run_dir / "corners.png")
    plt.close(fig)


def write_corner(run: PPORun, corner: Corner, result: EvalResult) -> str:
    """``corner_<...>.yaml`` in the run folder; returns its file name."""
    name = f"{corner.stem}.yaml"
    atomic_write_text(run.run_dir / name, yaml.safe_dump(row(corner.name, result), sort_keys=False))
    return name
