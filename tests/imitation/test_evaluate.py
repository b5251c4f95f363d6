"""What a student's evaluation reports: success over the instructions it was trained on (``BCConfig.tasks``), the
tank it ran behind and its teacher on the same episodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.evaluate import EvalResult, behind_tank
from robot_rl.imitation.evaluate import ChunkEvalResult, own_tasks_line
from robot_rl.runs.bc import teacher_folder

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


def test_the_teacher_beside_says_how_far_the_student_is_and_the_tank_it_ran_behind() -> None:
    tank = {"success": np.array([True, False, False, False]), "lowest_tank_j": np.array([3.0, 0.1, 2.0, 5.0])}
    student = ChunkEvalResult([EvalResult(tank, False, {}, tank_j=40.0)], [0])
    assert student.line().endswith(", 1 seeds, behind a 40 J tank (lowest 0.10 J)")
    assert student.summary()["tank_max_j"] == 40.0 and student.summary()["lowest_tank_j"] == 0.1
    assert student.teacher_line() is None and "teacher" not in student.summary()
    won = {"success": np.array([True, True, True, False])}
    student.teacher, student.teacher_run = ChunkEvalResult([EvalResult(won, False, {})], [0]), "runs/t"
    assert student.summary()["teacher"]["gap_points"] == 50.0 and student.summary()["teacher"]["run"] == "runs/t"
    line = student.teacher_line()
    assert line is not None and line.startswith("teacher runs/t on the same episodes: success 75.0% (95% CI ")
    assert line.endswith("the student is 50.0 points under it")
    student.teacher = ChunkEvalResult([EvalResult({"success": np.zeros(4, bool)}, False, {})], [0])
    assert str(student.teacher_line()).endswith("the student is 25.0 points above it")
    spoken = {t: behind_tank(t) for t in (40.0, 80.0, 8.0, 11.0, 18.0, 1.5, 180.0, 20.0)}
    assert [v.split()[1] for v in spoken.values()] == ["a", "an", "an", "an", "an", "a", "a", "a"]
    assert spoken[80.0] == "behind an 80 J tank" and spoken[1.5] == "behind a 1.5 J tank"


def test_the_teacher_folder_is_the_recorded_run_or_nothing(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "panda-lift" / "20261207-144706-0"
    run.mkdir(parents=True)
    assert teacher_folder(str(run)) is None  # no checkpoint.pt: not a run
    (run / "checkpoint.pt").write_bytes(b"")
    assert teacher_folder(str(run)) == run and teacher_folder(run) == run
    assert teacher_folder(f"{run} (panda-lift)") == run  # how datasets before 2026-12-07 named another task's teacher
    for other in ("scripted expert (PandaLiftExpert)", "", None, str(tmp_path / "gone"), f"{run} (x"):
        assert teacher_folder(other) is None, other
