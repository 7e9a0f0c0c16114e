"""One module per ``testbed`` noun; each exposes ``register(subparsers)``."""
