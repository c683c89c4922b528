"""The open database: directory lock, topic registry, partition map, the timer thread and
purgatory of delayed operations, background cleaner/flusher, producer-state manager."""
