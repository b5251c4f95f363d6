# Isaac Gym's package, for the type checker: gymapi.pyi is isaacgym-stubs' (written by `make lint` from the installed
# stubs, with its two `lambda` properties renamed: a Python keyword mypy cannot parse), gymtorch.pyi is ours.
