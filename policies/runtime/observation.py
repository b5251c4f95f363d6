"""Observation builder: named robot signals -> the flat policy input, in contract order.

One implementation serves the simulator (``torch`` tensors, batched over worlds) and the robot (``numpy`` arrays,
usually a batch of one). The array module is passed in as ``xp``; only operations that numpy and torch spell the same
way are used (``zeros``, ``roll``, ``concat``, boolean-mask assignment), so this file imports neither torch nor
any simulator.

Layout of the output, for terms ``t_1 .. t_K`` in contract order::

    obs[n] = [ s_1(k) * scale_1, s_1(k-1) * scale_1, ..., s_1(k-H_1+1) * scale_1,   # term 1, newest first
               s_2(k) * scale_2, ... ]                                            # term 2, ...

A world that was just reset has its whole history filled with its first sample, so no stale values from the
previous episode leak into the new one. A term with ``integral_limit > 0`` samples the running integral of its signal
(see :class:`~policies.runtime.contract.ObservationTerm`), restarted from zero with the episode; with
``integral_band > 0`` only samples within the band add to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.runtime.contract import Contract, ContractError, ObservationTerm

Array = Any  # numpy.ndarray or torch.Tensor


class ObservationBuilder:
    """Stacks scaled signals and their histories into ``[N, obs_dim]``.

    Args:
        terms: Observation terms, in order.
        num_envs: Batch size ``N``.
        xp: Array module, ``numpy`` or ``torch``.
        device: Torch device for the history buffers (``None`` for numpy).
        dt: Control period, s (needed by integral terms only).
    """

    def __init__(
        self, terms: Sequence[ObservationTerm], num_envs: int, xp: Any, device: Any = None, dt: float = 0.0
    ) -> None:
        self.terms = list(terms)
        self.num_envs = num_envs
        self.xp = xp
        self.dt = float(dt)
        kw = {} if device is None else {"device": device}
        self._hist = {t.name: xp.zeros((num_envs, t.history, t.size), dtype=xp.float32, **kw) for t in self.terms}
        self._integral = {
            t.name: xp.zeros((num_envs, t.size), dtype=xp.float32, **kw) for t in self.terms if t.integral_limit > 0
        }
        if self._integral and not self.dt > 0:
            raise ContractError(f"integral observation terms {sorted(self._integral)} need the control period dt > 0")
        self._fresh = xp.ones((num_envs,), dtype=bool, **kw)
        self.obs_dim = sum(t.dim for t in self.terms)

    @classmethod
    def for_contract(cls, contract: Contract, num_envs: int, dt: float | None = None) -> ObservationBuilder:
        """A numpy builder of ``contract``'s observation for ``num_envs`` robots, sampled every ``dt`` seconds
        (default: the contract's control period)."""
        import numpy as np

        return cls(contract.observation, num_envs, xp=np, dt=contract.control_period_s if dt is None else dt)

    def __call__(self, signals: Mapping[str, Array]) -> Array:
        """Push one sample of every signal and return the policy input.

        Args:
            signals: ``{source: [N, size]}`` raw robot signals in SI units.

        Returns:
            ``[N, obs_dim]`` float32 policy input.
        """
        self.push(signals)
        return self.read()

    def push(self, signals: Mapping[str, Array]) -> None:
        """Shift every history by one control step and store the newest sample (fresh worlds: whole history)."""
        fresh = self._fresh
        any_fresh = bool(fresh.any())
        raw = [self._signal(signals, t) for t in self.terms]  # every signal checked before any state changes
        for t, x in zip(self.terms, raw, strict=True):
            if t.name in self._integral:
                if any_fresh:
                    self._integral[t.name][fresh] = 0.0
                self._integral[t.name] = self._integrate(t, self._integral[t.name], x)
        scaled = [self._sample(t, x) for t, x in zip(self.terms, raw, strict=True)]
        for t, x in zip(self.terms, scaled, strict=True):
            buf = self.xp.roll(self._hist[t.name], 1, 1) if t.history > 1 else self._hist[t.name]
            buf[:, 0] = x
            if any_fresh and t.history > 1:
                buf[fresh] = x[fresh][:, None, :]
            self._hist[t.name] = buf
        self._fresh[:] = False

    def reset(self, mask: Array | None = None, signals: Mapping[str, Array] | None = None) -> None:
        """Restart the history of worlds in ``mask`` (bool ``[N]``; all if ``None``).

        With ``signals``, the masked worlds' histories are filled with this sample now (other worlds untouched);
        without, they are filled by the next :meth:`push`.
        """
        if mask is None:
            mask = self.xp.ones((self.num_envs,), dtype=bool, **self._device_kw())
        if signals is None:
            self._fresh[mask] = True
            return
        raw = [self._signal(signals, t) for t in self.terms]
        for t, x in zip(self.terms, raw, strict=True):
            if t.name in self._integral:
                self._integral[t.name][mask] = self._integrate(t, self.xp.zeros_like(x), x)[mask]
        scaled = [self._sample(t, x) for t, x in zip(self.terms, raw, strict=True)]
        for t, x in zip(self.terms, scaled, strict=True):
            self._hist[t.name][mask] = x[mask][:, None, :]
        self._fresh[mask] = False

    def state_dict(self) -> dict[str, Array]:
        """Histories and fresh flags (copies), to save an exact continuation."""

        def copy(v: Array) -> Array:
            return v.clone() if hasattr(v, "clone") else v.copy()

        return {
            "fresh": copy(self._fresh),
            **{f"hist.{k}": copy(v) for k, v in self._hist.items()},
            **{f"integral.{k}": copy(v) for k, v in self._integral.items()},
        }

    def load_state_dict(self, state: dict[str, Array]) -> None:
        """Restore what :meth:`state_dict` returned (same terms, same ``num_envs``)."""
        self._fresh[:] = state["fresh"]
        for k in self._hist:
            self._hist[k][:] = state[f"hist.{k}"]
        for k in self._integral:
            self._integral[k][:] = state[f"integral.{k}"]

    def integral(self, name: str) -> Array:
        """Current integral ``[N, size]`` (raw units x s, unscaled) of the integral term ``name``."""
        return self._integral[name]

    def latest(self, name: str) -> Array:
        """Newest sample ``[N, size]`` of term ``name`` in its raw units (unscaled; integral terms: the integral)."""
        term = next((t for t in self.terms if t.name == name), None)
        if term is None:
            raise ContractError(f"no observation term '{name}'; terms: {[t.name for t in self.terms]}")
        return self._hist[name][:, 0] / term.scale

    def read(self) -> Array:
        """Current policy input ``[N, obs_dim]`` (no history shift)."""
        return self.xp.concat([self._hist[t.name].reshape(self.num_envs, t.dim) for t in self.terms], 1)

    def _integrate(self, t: ObservationTerm, integral: Array, x: Array) -> Array:
        """One step of the clipped integral ``clip(I + dt * x, -limit, limit)`` (a new array); with a band, elements
        with ``|x| >= band`` add nothing."""
        if t.integral_band > 0:
            x = self.xp.where(self.xp.abs(x) < t.integral_band, x, 0.0)
        return self.xp.clip(integral + self.dt * x, -t.integral_limit, t.integral_limit)

    def _sample(self, t: ObservationTerm, x: Array) -> Array:
        """The term's newest sample before stacking: the scaled signal, or its scaled integral."""
        return (self._integral[t.name] if t.integral_limit > 0 else x) * t.scale

    def _device_kw(self) -> dict[str, Any]:
        dev = getattr(self._fresh, "device", None)
        return {"device": dev} if dev is not None and self.xp.__name__ == "torch" else {}

    def _signal(self, signals: Mapping[str, Array], term: ObservationTerm) -> Array:
        try:
            x = signals[term.source]
        except KeyError:
            raise ContractError(
                f"observation term '{term.name}' needs signal '{term.source}', which was not provided; "
                f"given: {sorted(signals)}"
            ) from None
        if tuple(x.shape) != (self.num_envs, term.size):
            raise ContractError(
                f"signal '{term.source}' has shape {tuple(x.shape)}, "
                f"observation term '{term.name}' expects {(self.num_envs, term.size)}"
            )
        return x
