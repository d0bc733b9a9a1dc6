"""Reliability: planted bugs caught, determinism, invariance, isolation, localization."""
