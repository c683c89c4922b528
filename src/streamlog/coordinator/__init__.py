"""The coordination layer: consumer groups (coordinator, generations, offsets) and partition assignors."""

# FindCoordinator's key types (Kafka's FindCoordinatorRequest.CoordinatorType).
GROUP_COORDINATOR, TRANSACTION_COORDINATOR = 0, 1
