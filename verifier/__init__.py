"""Z3 verification of graph substitutions (axioms, axiom validation, prover, refuter).

Empty until the verifier lands (issue 4); the package exists so the layout and the
installed distribution are what later work builds on.
"""
