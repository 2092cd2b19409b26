"""The TrainingJob/Queue custom resources: CRD schemas generated from `scheduler.spec`
(`crdgen`) and the pure reconcile functions that turn a CR into a store action and a
status patch (`reconcile`). No `kubernetes` import here: the CR-watching I/O lives in
`scheduler.backends.kubernetes`, which calls these functions.
"""
