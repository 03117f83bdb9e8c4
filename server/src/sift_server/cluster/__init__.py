"""Scale-out over NATS JetStream: ``sift gateway`` (HTTP, no model) publishes
each request to its model's work-queue subject; ``sift worker`` (registry,
engine, adapters) pulls it, runs it through the serving core's one entry
(``core.serve.handle``) and the same batching engine as ``sift serve``, replies
on core NATS, then acknowledges."""
