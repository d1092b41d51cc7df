"""Schedules: loop transformations over tensor expressions (split, fuse, reorder, tile, ...)."""

from taso_py.codegen.schedule.schedule import Fuse, LoopKind, Schedule, Split, Stage, create_schedule

__all__ = ["Fuse", "LoopKind", "Schedule", "Split", "Stage", "create_schedule"]
