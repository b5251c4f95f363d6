"""Policy against real drivers: ``ros2 launch robot_rl_ros robot.launch.py model:=policy.onnx [params:=...]``.

Configure and activate the lifecycle node when the robot is ready: ``ros2 lifecycle set /policy_node configure``,
then ``activate``.
"""

from robot_rl_ros.launching import description


def generate_launch_description() -> object:
    return description("quadrotor_robot.yaml", sim=False)
