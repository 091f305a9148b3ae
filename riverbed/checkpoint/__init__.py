"""Checkpoint stores for window and operator snapshots (issue: checkpoints)."""
