"""The scheduler loop (`service.Loop`): reconcile store and cluster, run the core, apply."""
