"""Schedules: loop transformations over tensor expressions (split, fuse, reorder, tile, ...)."""

from codegen.schedule.schedule import Fuse, LoopKind, Schedule, Split, Stage, create_schedule

__all__ = ["Fuse", "LoopKind", "Schedule", "Split", "Stage", "create_schedule"]
