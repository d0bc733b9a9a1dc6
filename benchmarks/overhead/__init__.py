"""Overhead: the kernel audit, cast ratios and copies the overhead gate limits."""
