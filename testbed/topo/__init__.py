"""topo."""
