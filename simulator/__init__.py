"""Trace-driven discrete-event simulation of a GPU cluster, using the live policies."""
