"""Training windows over demonstrations: observation horizon ``To`` and prediction horizon ``Tp`` (Chi et al.).

For frame ``k`` of an episode with ``T`` frames (timing diagram for ``To = 2``, ``Tp = 4``)::

    frames        ... k-1   k   k+1  k+2  k+3 ...
    observations      |-- To --|                    obs[k-To+1 .. k]
    actions                |------ Tp ------|       action[k .. k+Tp-1]
    executed               |-- Ta --|               (at run time: the first Ta of them, then re-plan)

A window never crosses an episode boundary: observation indices before the episode's first frame repeat the first
frame (what the robot's history holds right after a reset), action indices past the last frame repeat the last
action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from robot_rl.imitation.dataset import Episode, decode_frames


class Windows:
    """Index tables of every training window of a list of episodes (one window per frame).

    Args:
        episodes: Demonstrations.
        obs_horizon: ``To`` >= 1.
        pred_horizon: ``Tp`` >= 1.
        cameras: Camera name -> image ``(height, width)`` to decode for image windows (empty: none).

    Attributes:
        state: All frames' observations ``[F, D_o]`` float32 (episodes concatenated).
        action: All frames' actions ``[F, D_a]`` float32.
        obs_index: ``[F, To]`` int64 rows of ``state`` forming each window's observations, oldest first.
        action_index: ``[F, Tp]`` int64 rows of ``action`` forming each window's action chunk.
        images: Camera name -> all frames' images ``uint8 [F, H, W, 3]`` (indexed by ``obs_index`` like ``state``).
        tasks: The episodes' distinct task texts (instructions), in order of first appearance.
        frame_task: ``[F]`` int64 index into ``tasks`` of each frame's episode.
    """

    def __init__(
        self,
        episodes: Sequence[Episode],
        obs_horizon: int,
        pred_horizon: int,
        cameras: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        if obs_horizon < 1 or pred_horizon < 1:
            raise ValueError(f"horizons must be >= 1, got obs {obs_horizon}, prediction {pred_horizon}")
        if not episodes:
            raise ValueError("no episodes to make windows from")
        self.state = np.concatenate([e.state for e in episodes]).astype(np.float32)
        self.action = np.concatenate([e.action for e in episodes]).astype(np.float32)
        lengths = np.array([e.length for e in episodes])
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        ends = np.repeat(np.cumsum(lengths) - 1, lengths)
        frame = np.arange(len(self.state))
        past = frame[:, None] + np.arange(-obs_horizon + 1, 1)[None, :]
        future = frame[:, None] + np.arange(pred_horizon)[None, :]
        self.obs_index = np.clip(past, starts[:, None], ends[:, None]).astype(np.int64)
        self.action_index = np.clip(future, starts[:, None], ends[:, None]).astype(np.int64)
        self.images = {c: decode_frames(episodes, c, size) for c, size in (cameras or {}).items()}
        index: dict[str, int] = {}
        per_episode = np.array([index.setdefault(e.task, len(index)) for e in episodes], np.int64)
        self.tasks = list(index)
        self.frame_task = np.repeat(per_episode, lengths)

    def __len__(self) -> int:
        return len(self.obs_index)

    def batch(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Windows ``rows``: observations ``[B, To, D_o]`` and action chunks ``[B, Tp, D_a]``."""
        return self.state[self.obs_index[rows]], self.action[self.action_index[rows]]

    def image_batch(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The same windows' camera images, ``uint8 [B, To, H, W, 3]`` per camera."""
        return {c: frames[self.obs_index[rows]] for c, frames in self.images.items()}
