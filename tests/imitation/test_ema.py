"""The students' weight average (:class:`robot_rl.imitation.train_bc.EMA`): Chi et al.'s warm-up rule, one
foreach call over every parameter tensor, buffers copied."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from robot_rl.imitation.train_bc import EMA


def test_the_average_follows_the_warm_up_rule_and_copies_buffers() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    model.train()(torch.randn(8, 3))  # the running statistics (buffers) move
    ema = EMA(model, power=0.75, max_decay=0.999)  # type: ignore[arg-type]  # any module averages alike
    start = [p.detach().clone() for p in ema.model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model(torch.randn(8, 3))
    ema.update(model, step=3)
    decay = min(0.999, 1.0 - 4.0**-0.75)
    for avg, old, new in zip(ema.model.parameters(), start, model.parameters(), strict=True):
        torch.testing.assert_close(avg, decay * old + (1.0 - decay) * new)
    for avg_buf, buf in zip(ema.model.buffers(), model.buffers(), strict=True):
        assert torch.equal(avg_buf, buf)


def test_a_model_of_another_shape_is_refused() -> None:
    ema = EMA(nn.Linear(3, 2), power=0.75, max_decay=0.999)  # type: ignore[arg-type]
    other: Any = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="same number of tensors"):
        ema.update(other, step=1)
