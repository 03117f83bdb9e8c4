"""Scale-out over NATS JetStream: ``sift gateway`` (HTTP, no model) publishes
each request to its model's work-queue subject; ``sift worker`` (registry,
engine, adapters) pulls, runs it through the same routes and batching engine
as ``sift serve``, replies on core NATS, then acknowledges."""
