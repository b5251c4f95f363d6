"""Simulation backends: batched physics steppers that tasks build on (numpy in and out)."""
