"""What the applications share of a fleet spec at run time: the context reducer, the feature
matrix and the simulator, compiled from `schemas.spec` (pure: numpy, no I/O)."""

from precast.fleet.runtime import Fleet, load_fleet

__all__ = ["Fleet", "load_fleet"]
