"""Optical circuit switching: the pure model (:mod:`testbed.ocs.model`); root glue in testbed/ocs/node.py."""
