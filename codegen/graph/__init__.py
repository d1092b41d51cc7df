"""The graph compiler: fusion, memory planning and one compiled module per model."""

from codegen.graph.compiler import CompileReport, compile_graph
from codegen.graph.memory import Lifetime, Plan, plan_memory
from codegen.graph.partition import Group, partition

__all__ = ["CompileReport", "Group", "Lifetime", "Plan", "compile_graph", "partition", "plan_memory"]
