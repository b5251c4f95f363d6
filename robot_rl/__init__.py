"""robot-rl training: PPO, runners, configs, evaluation and the ``robot-rl`` CLI."""
