"""Cluster backends behind one interface (see base.py): kubernetes, local, sim."""
