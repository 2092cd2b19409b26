"""Foreign pods: pods Shoal did not create that name it as their scheduler, placed by
the core beside Shoal's jobs (`foreign`), their PodGroups placed whole
(`foreigngangs`), their own ResourceClaims (`draforeign`), and kube-scheduler's fit
rules the core does not count (`nodefit`)."""
