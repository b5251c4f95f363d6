"""Declarative domain randomisation.

A task declares which parameters it can randomise (:class:`ParamSpec`: nominal value, physical lower bound); the
config lists :class:`RandomizationTerm` entries, for example::

    randomization:
      - {param: mass, distribution: uniform, range: [0.9, 1.2], operation: scale, timing: reset}
      - {param: action_latency, distribution: uniform, range: [0, 2], operation: add, timing: reset}
      - {param: disturbance_force, distribution: gaussian, range: [0.0, 0.01], clip: [-0.02, 0.02],
         operation: add, timing: interval, interval_s: 1.0, per_element: true}

Values are checked when the spec is loaded: an unknown parameter lists the supported ones, and a range that could
produce an unphysical value (negative mass, an inertia that violates the triangle inequality, a gaussian without
clipping on a bounded parameter) is refused before any simulation starts.

Sampling is a pure function of (nominal values, term, random generator) and writes into the task's per-env
parameter tensors ``[N, size]``.

A share of the training resets can be drawn at the corners of the box instead (``corner_share``): every parameter
of such a world sits at the low or the high edge of its range, each edge with probability 1/2. A policy trained on
the distribution alone meets a corner (the lightest airframe with the quickest rotors and the longest latency) about
as rarely as the product of its terms' tails, and can fail there while it flies the average; evaluation always draws
from the distribution itself (``corner_share`` 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from sim.vec_env import TaskConfigError

Timing = Literal["startup", "reset", "interval"]


class RandomizationError(TaskConfigError):
    """A randomisation term names an unknown parameter or a range that could give unphysical values."""


@dataclass
class RandomizationTerm:
    """One randomised parameter.

    Attributes:
        param: Parameter name, one of the task's :class:`ParamSpec` names.
        distribution: ``uniform`` on ``range``, ``log_uniform`` on ``range`` (both > 0), or ``gaussian`` with
            ``range = [mean, std]`` clipped to ``clip``.
        range: Distribution bounds (uniform, log-uniform) or ``[mean, std]`` (gaussian).
        operation: ``scale`` multiplies the nominal value, ``add`` adds to it, ``abs`` replaces it.
        timing: ``startup`` (when the env is reset as a whole: construction or ``reset(seed)``), ``reset``
            (every episode), ``interval`` (every ``interval_s`` seconds).
        interval_s: Period for ``interval`` terms, seconds.
        clip: ``[low, high]`` clipping of gaussian samples (required for gaussian terms).
        per_element: Sample each element of a vector parameter independently (else one draw shared by all).
    """

    param: str
    distribution: Literal["uniform", "log_uniform", "gaussian"] = "uniform"
    range: tuple[float, float] = (1.0, 1.0)
    operation: Literal["scale", "add", "abs"] = "scale"
    timing: Timing = "reset"
    interval_s: float = 0.0
    clip: tuple[float, float] | None = None
    per_element: bool = False


@dataclass(frozen=True)
class ParamSpec:
    """A parameter a task can randomise.

    Attributes:
        nominal: Nominal value, one entry per element (SI units).
        lower: Values must stay strictly above this bound (``None``: unbounded).
        unit: SI unit, for messages.
        check: Extra validity check on a ``[M, size]`` batch of candidate values; returns an error or ``None``.
    """

    nominal: tuple[float, ...]
    lower: float | None = None
    unit: str = ""
    check: Callable[[torch.Tensor], str | None] | None = None

    @property
    def size(self) -> int:
        """Number of elements of the parameter."""
        return len(self.nominal)


def inertia_is_valid(diag: torch.Tensor) -> str | None:
    """Principal moments ``[M, 3]`` must be positive and satisfy the triangle inequality ``I_a + I_b >= I_c``."""
    if bool((diag <= 0).any()):
        return "principal moments of inertia must be positive"
    s = diag.sum(-1, keepdim=True)
    if bool((2 * diag > s * (1 + 1e-9)).any()):
        return (
            "principal moments of inertia must satisfy I_a + I_b >= I_c "
            "(the triangle inequality of a physically realisable body)"
        )
    return None


class DomainRandomizer:
    """Applies randomisation terms to per-env parameter tensors.

    Args:
        terms: Terms from the config (validated here).
        specs: The task's randomisable parameters.
        num_envs: Batch size ``N``.
        dt: Control period (s), to turn ``interval_s`` into steps.
        device: Torch device of the parameter tensors.
        corner_share: Share of the worlds reset (``startup``/``reset``) whose draws of that timing sit at an edge of
            their range (:func:`edge_value`, each edge with probability 1/2, each element of a ``per_element``
            term on its own), in ``[0, 1]``; ``interval`` re-draws during the episode follow the distribution.
    """

    def __init__(
        self,
        terms: Sequence[RandomizationTerm],
        specs: dict[str, ParamSpec],
        num_envs: int,
        dt: float,
        device: torch.device,
        corner_share: float = 0.0,
    ) -> None:
        if not 0.0 <= corner_share <= 1.0:  # NaN-safe
            raise RandomizationError(f"randomization corner_share must be in [0, 1], got {corner_share}")
        self.corner_share = corner_share
        self.terms = list(terms)
        self.specs = specs
        self.device = device
        self.enabled = True
        for i, term in enumerate(self.terms):
            validate_term(term, specs, where=f"randomization[{i}]")
        self.values = {name: self.nominal(name).expand(num_envs, -1).clone() for name in specs}
        self._interval_steps = [max(1, round(t.interval_s / dt)) for t in self.terms]

    def nominal(self, name: str) -> torch.Tensor:
        """Nominal value ``[1, size]`` of parameter ``name``."""
        return torch.tensor([self.specs[name].nominal], dtype=torch.float32, device=self.device)

    def apply(self, mask: torch.Tensor, timing: Timing, gen: torch.Generator, step: torch.Tensor | None = None) -> None:
        """Resample the terms with ``timing`` for the envs in ``mask`` (bool ``[N]``).

        With randomisation disabled, the masked envs get nominal values (for ``startup``/``reset``).
        ``step`` (``[N]`` episode step counters) selects which envs are due for ``interval`` terms.
        """
        if not bool(mask.any()):
            return
        if not self.enabled:
            if timing != "interval":
                for name in self.specs:
                    self.values[name][mask] = self.nominal(name)
            return
        if timing == "reset":  # a reset starts from nominal, then applies startup-persistent and reset terms
            for term in self.terms:
                if term.timing in ("reset", "interval"):
                    self.values[term.param][mask] = self.nominal(term.param)
        at_corner = None
        if timing != "interval" and self.corner_share > 0:  # no extra draws without it: runs stay reproducible
            at_corner = torch.rand(mask.shape, generator=gen, device=self.device) < self.corner_share
        for term, every in zip(self.terms, self._interval_steps, strict=True):
            if term.timing != timing and not (timing == "reset" and term.timing == "interval"):
                continue
            m = mask
            if timing == "interval":
                assert step is not None
                m = mask & (step % every == 0) & (step > 0)
            idx = m.nonzero().squeeze(-1)
            if idx.numel() == 0:
                continue
            size = self.specs[term.param].size
            sample = sample_term(term, idx.numel(), size, gen, self.device)
            if at_corner is not None:
                edges = sample_edges(term, idx.numel(), size, gen, self.device)
                sample = torch.where(at_corner[idx, None], edges, sample)
            base = self.nominal(term.param).expand(idx.numel(), -1)
            self.values[term.param][idx] = combine(term.operation, base, sample)


def sample_term(
    term: RandomizationTerm, count: int, size: int, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Draw ``[count, size]`` samples of ``term``'s distribution (one shared draw per row unless per_element)."""
    cols = size if term.per_element else 1
    u = torch.rand((count, cols), generator=gen, device=device)
    a, b = term.range
    if term.distribution == "uniform":
        x = a + (b - a) * u
    elif term.distribution == "log_uniform":
        x = torch.exp(math.log(a) + (math.log(b) - math.log(a)) * u)
    else:
        x = a + b * torch.randn((count, cols), generator=gen, device=device)
        assert term.clip is not None
        x = x.clamp(term.clip[0], term.clip[1])
    return x.expand(count, size)


def sample_edges(
    term: RandomizationTerm, count: int, size: int, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Draw ``[count, size]`` edges of ``term``'s range (:func:`edge_value`), low or high with probability 1/2 (one
    shared draw per row unless per_element)."""
    cols = size if term.per_element else 1
    high = torch.rand((count, cols), generator=gen, device=device) < 0.5
    lo, hi = edge_value(term, "lo"), edge_value(term, "hi")
    return torch.where(high, hi, lo).to(torch.float32).expand(count, size)


def combine(operation: str, nominal: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """Apply ``operation`` (``scale`` | ``add`` | ``abs``) of a sample to the nominal value."""
    if operation == "scale":
        return nominal * sample
    if operation == "add":
        return nominal + sample
    return sample.clone()


def sample_bounds(term: RandomizationTerm) -> tuple[float, float]:
    """Smallest and largest value ``term`` can draw."""
    if term.distribution == "gaussian":
        assert term.clip is not None
        return term.clip
    return term.range


def edge_value(term: RandomizationTerm, edge: str) -> float:
    """The value of ``term`` at ``edge`` (``lo`` | ``hi``): its lowest draw, or its highest (just below ``hi`` for a
    uniform or log-uniform term, whose draws are in ``[lo, hi)``; a gaussian's upper clip as is). Float32, as the
    randomiser draws."""
    lo, hi = sample_bounds(term)
    if edge == "lo" or hi <= lo:
        return lo
    if term.distribution == "gaussian":
        return hi
    return float(np.nextafter(np.float32(hi), np.float32(lo)))


def validate_term(term: RandomizationTerm, specs: dict[str, ParamSpec], where: str) -> None:
    """Refuse unknown parameters and ranges that can produce unphysical values.

    Raises:
        RandomizationError: Naming the term, the parameter and what is wrong.
    """
    if term.param not in specs:
        raise RandomizationError(
            f"{where}: parameter '{term.param}' cannot be randomised by this task; "
            f"supported parameters: {', '.join(sorted(specs))}"
        )
    spec = specs[term.param]
    a, b = term.range
    tag = f"{where} ({term.param})"
    if not all(math.isfinite(v) for v in (a, b)):
        raise RandomizationError(f"{tag}: range must be finite, got {list(term.range)}")
    if term.clip is not None and not all(math.isfinite(v) for v in term.clip):
        raise RandomizationError(f"{tag}: clip must be finite, got {list(term.clip)}")
    if not math.isfinite(term.interval_s) or term.interval_s < 0:
        raise RandomizationError(f"{tag}: interval_s must be finite and >= 0, got {term.interval_s}")
    if term.distribution == "gaussian":
        if term.clip is None:
            raise RandomizationError(f"{tag}: a gaussian term needs 'clip: [low, high]' so every sample is bounded")
        if b < 0:
            raise RandomizationError(f"{tag}: gaussian std (range[1]) must be >= 0, got {b}")
        if term.clip[0] > term.clip[1]:
            raise RandomizationError(f"{tag}: clip low {term.clip[0]} exceeds clip high {term.clip[1]}")
    elif a > b:
        raise RandomizationError(f"{tag}: range low {a} exceeds high {b}")
    if term.distribution == "log_uniform" and a <= 0:
        raise RandomizationError(f"{tag}: log_uniform needs a positive range, got {list(term.range)}")
    if term.timing == "interval" and term.interval_s <= 0:
        raise RandomizationError(f"{tag}: timing 'interval' needs interval_s > 0")
    lo, hi = sample_bounds(term)
    nominal = torch.tensor([spec.nominal], dtype=torch.float64)
    corners = _corners(lo, hi, spec.size if term.per_element else 1).expand(-1, spec.size)
    values = combine(term.operation, nominal.expand(corners.shape[0], -1), corners)
    if spec.lower is not None and bool((values <= spec.lower).any()):
        worst = float(values.min())
        raise RandomizationError(
            f"{tag}: {term.operation} by {list(term.range)} can give {worst:g} {spec.unit}, "
            f"but the value must stay above {spec.lower:g} {spec.unit}"
        )
    if not bool(torch.isfinite(values).all()):
        raise RandomizationError(f"{tag}: {term.operation} by {list(term.range)} gives non-finite values")
    if spec.check is not None and (msg := spec.check(values)):
        raise RandomizationError(f"{tag}: {term.operation} by {list(term.range)} is refused: {msg}")


def _corners(lo: float, hi: float, dims: int) -> torch.Tensor:
    """All ``2**dims`` corners of the box ``[lo, hi]^dims`` (extremes of a per-element draw)."""
    grid = torch.cartesian_prod(*([torch.tensor([lo, hi], dtype=torch.float64)] * dims))
    return grid.reshape(-1, dims)
