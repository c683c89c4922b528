"""Client layer: producer (accumulator, partitioners), consumer, admin over the broker interface."""
