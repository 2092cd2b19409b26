"""What Shoal reads of the cluster, pure or from the caches: nodes as the core's `Node`s
(`inventory`), pods' state and allocations (`status`), what the loop reads of pods every
cycle (`podindex`), and kube-scheduler's rules for what a pod asks of a node
(`podfit`, `podrules`)."""
