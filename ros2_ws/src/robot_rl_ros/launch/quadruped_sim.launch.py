"""Simulated A1 + walking policy: ``ros2 launch robot_rl_ros quadruped_sim.launch.py model:=policy.onnx``.

The same graph runs without ``ros2 launch`` as ``robot-rl deploy --params config/quadruped_sim.yaml --sim``.
"""

from robot_rl_ros.launching import description


def generate_launch_description() -> object:
    return description("quadruped_sim.yaml", sim=True)
