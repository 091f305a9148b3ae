"""The asyncio runtime that hosts operator graphs (issue: the asyncio runtime).

It drives `riverbed.windows` exactly as the trace command does: insert,
punctuation, time advance; the windows themselves know nothing of asyncio.
"""
