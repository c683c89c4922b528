"""The coordination layer: consumer groups (coordinator, generations, offsets) and partition assignors."""
