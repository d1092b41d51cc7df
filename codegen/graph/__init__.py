"""The graph compiler: fusion, memory planning and one compiled module per model."""

from taso_py.codegen.graph.compiler import CompileReport, compile_graph
from taso_py.codegen.graph.memory import Lifetime, Plan, plan_memory
from taso_py.codegen.graph.partition import Group, partition

__all__ = ["CompileReport", "Group", "Lifetime", "Plan", "compile_graph", "partition", "plan_memory"]
