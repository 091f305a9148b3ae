"""Deploys riverbed graphs as Spark Structured Streaming stages (issue: the Spark bridge)."""
