"""What a student's evaluation reports: success over the instructions it was trained on (``BCConfig.tasks``)."""

from __future__ import annotations

import numpy as np

from robot_rl.evaluate import EvalResult
from robot_rl.imitation.evaluate import ChunkEvalResult, own_tasks_line

TEXTS = ["lift the red cube", "pick up the red cube", "lift the green cube", "pick up the green cube"]


def _result(instruction: list[int], success: list[bool]) -> ChunkEvalResult:
    episodes = {"success": np.array(success), "instruction": np.array(instruction)}
    return ChunkEvalResult([EvalResult(episodes, False, {})], [0])


def test_success_on_its_own_instructions_counts_only_their_episodes() -> None:
    result = _result([0, 1, 2, 3, 0, 2], [True, True, False, False, False, False])
    own = result.on_instructions(TEXTS, ["lift the red cube", "pick up the red cube"])
    assert own is not None and own["episodes"] == 3 and own["success_rate"] == 2 / 3
    lo, hi = own["success_ci95"]
    assert lo < 2 / 3 < hi
    assert result.success_rate == 2 / 6  # the pooled figure, over every instruction
    assert own_tasks_line(own).startswith("on its 2 own instruction(s): success 66.7% (95% CI")

    none = result.on_instructions(TEXTS, ["lift the blue cube"])
    assert none is not None and none["episodes"] == 0 and none["success_rate"] is None
    assert own_tasks_line(none) == "on its 1 own instruction(s): none was drawn in this evaluation"


def test_episodes_without_instructions_report_nothing_for_tasks() -> None:
    result = ChunkEvalResult([EvalResult({"success": np.array([True, False])}, False, {})], [0])
    assert result.on_instructions(TEXTS, ["lift the red cube"]) is None
