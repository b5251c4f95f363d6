"""Simulated robot + policy: ``ros2 launch robot_rl_ros sim.launch.py model:=policy.onnx [params:=...]``.

The same graph runs without ``ros2 launch`` as ``robot-rl deploy --params <file> --sim``.
"""

from robot_rl_ros.launching import description


def generate_launch_description() -> object:
    return description("quadrotor_sim.yaml", sim=True)
