"""Storage layer: Kafka RecordBatch v2 codec, segments, sparse indexes, partition logs, recovery.

Imports only streamlog.native, streamlog.errors and streamlog.structs from the
rest of the library (a test enforces the layering).
"""
