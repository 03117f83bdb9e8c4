"""``sift bench``: measure the batching engine through the real HTTP API.

One module per job: ``stats`` (percentiles, ratios), ``ordering`` (balanced
arm orders), ``arms`` (policy and revision arms, manifests), ``workload``
(input texts), ``client`` (SDK / raw-httpx load generator with validation),
``server_proc`` (one server process per run), ``phases`` (warmup, sequential,
bursts, closed loop), ``join`` (client requests to traced forwards),
``ceiling`` (in-process model throughput), ``replay_plan``, ``replay`` and
``replay_analysis`` (each run's own forwards replayed in-process, paired with
what it served), ``analysis`` (figures and targets),
``plots``, ``report``, ``runner`` (trials) and ``cli``.
"""
