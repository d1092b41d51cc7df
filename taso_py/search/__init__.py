"""Searching for the cheapest equivalent graph: TASO's α-relaxed backtracking search."""
