"""Shoal's own workers: the worker pod (`workerpod`) and the objects beside it
(`manifests`, `objectmeta`), launching and stopping them (`workerpods`, through the
Eviction API: `disruption`), binding (`podbinder`), resizing (`resize`), gangs as
Workloads and PodGroups (`gangs`) and the room kept for preemptors (`nominees`)."""
