"""The SPL standard toolkit operators (issue: the standard toolkit)."""
