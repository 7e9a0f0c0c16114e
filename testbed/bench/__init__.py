"""Benchmarks run by ``testbed bench NAME``; each module exposes ``register(subparsers)``."""
