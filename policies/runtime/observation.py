"""Observation builder: named robot signals -> the flat policy input, in contract order.

One implementation serves the simulator (``torch`` tensors, batched over worlds) and the robot (``numpy`` arrays,
usually a batch of one). The array module is passed in as ``xp``; only operations that numpy and torch spell the same
way are used (``zeros``, ``roll``, ``concat``, boolean-mask assignment), so this file imports neither torch nor
any simulator.

Layout of the output, for terms ``t_1 .. t_K`` in contract order::

    obs[n] = [ s_1(k) * scale_1, s_1(k-1) * scale_1, ..., s_1(k-H_1+1) * scale_1,   # term 1, newest first
               s_2(k) * scale_2, ... ]                                            # term 2, ...

A world that was just reset has its whole history filled with its first sample, so no stale values from the
previous episode leak into the new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.runtime.contract import ContractError, ObservationTerm

Array = Any  # numpy.ndarray or torch.Tensor


class ObservationBuilder:
    """Stacks scaled signals and their histories into ``[N, obs_dim]``.

    Args:
        terms: Observation terms, in order.
        num_envs: Batch size ``N``.
        xp: Array module, ``numpy`` or ``torch``.
        device: Torch device for the history buffers (``None`` for numpy).
    """

    def __init__(self, terms: Sequence[ObservationTerm], num_envs: int, xp: Any, device: Any = None) -> None:
        self.terms = list(terms)
        self.num_envs = num_envs
        self.xp = xp
        kw = {} if device is None else {"device": device}
        self._hist = {t.name: xp.zeros((num_envs, t.history, t.size), dtype=xp.float32, **kw) for t in self.terms}
        self._fresh = xp.ones((num_envs,), dtype=bool, **kw)
        self.obs_dim = sum(t.dim for t in self.terms)

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
        scaled = [self._signal(signals, t) * t.scale for t in self.terms]  # every signal checked before any push
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
        scaled = [self._signal(signals, t) * t.scale for t in self.terms]
        for t, x in zip(self.terms, scaled, strict=True):
            self._hist[t.name][mask] = x[mask][:, None, :]
        self._fresh[mask] = False

    def state_dict(self) -> dict[str, Array]:
        """Histories and fresh flags (copies), to save an exact continuation."""
        return {
            "fresh": self._fresh.clone() if hasattr(self._fresh, "clone") else self._fresh.copy(),
            **{f"hist.{k}": (v.clone() if hasattr(v, "clone") else v.copy()) for k, v in self._hist.items()},
        }

    def load_state_dict(self, state: dict[str, Array]) -> None:
        """Restore what :meth:`state_dict` returned (same terms, same ``num_envs``)."""
        self._fresh[:] = state["fresh"]
        for k in self._hist:
            self._hist[k][:] = state[f"hist.{k}"]

    def read(self) -> Array:
        """Current policy input ``[N, obs_dim]`` (no history shift)."""
        return self.xp.concat([self._hist[t.name].reshape(self.num_envs, t.dim) for t in self.terms], 1)

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
