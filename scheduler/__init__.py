"""Shoal: a GPU-aware job scheduler for Kubernetes."""
