"""``sift bench``: measure the batching engine through the real HTTP API.

Laid out by job, in layers; imports point down this list, never up
(tests/bench/test_bench_layering.py):

- ``cli``: the ``sift bench`` command and its subcommands;
- ``tools`` (``sift overhead``, ``sift primitives``, ``sift bench floor``),
  ``cluster`` (``sift bench cluster``: the queue path), ``simulate`` (the
  simulator and ``sift simulate``);
- ``run``: trials (``runner``, ``config``), the load ``phases``, balanced arm
  ``ordering``, the ``join`` of requests to traced forwards, the in-process
  ``ceiling`` and ``replay`` (with ``replay_plan``);
- ``arms``: what serves a run (``arm``: policy, revision, backend, gateway and
  reference arms, manifests), one ``server`` process per run, its ``cpu`` use,
  the ``gateway`` arm's processes, the ``reference`` SIE server;
- ``client``: the load generator's clients (``transports``: SDK and httpx;
  ``raw`` over ``raw_http``) and the ``answer`` checks they share;
- ``workload``: the input ``texts``, the ``request`` each phase sends, test ``heads``;
- ``report``: ``analysis``, ``targets``, ``dominance``, ``stats``, ``distribution``,
  the Markdown report (``markdown``, ``replay_section``, ``tables``), ``plots``,
  ``archive``.
"""
