"""roce."""
