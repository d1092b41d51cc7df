"""Rule matching and rewriting on the graph IR: `matcher` finds, `rewrite` plans and applies."""
