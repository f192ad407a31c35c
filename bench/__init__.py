"""emergence-bench: runner, CLI, results and statistics."""
