"""Fabric topologies (pure: no root, no Mininet): generators, specs, addressing, metrics, drawings.

    spec YAML --spec.load_spec()--> Spec --spec.build_graph()--> nx.Graph (contract: topo/graph.py)
                                              |                        |
                        generators + builder (names, ports, dpids)     +--> metrics.summary() / draw.draw()
                        addressing.assign (ip, mac)                    +--> testbed.emu.Replica

See docs/specs.md for the spec format, the dilation invariants, the addressing plan and the cost table.
"""
