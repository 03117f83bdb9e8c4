"""Where an adapter's forward runs: PyTorch, ONNX Runtime or OpenVINO, and at
which precision; ``auto`` picks, on this machine, the fastest one whose outputs
on a fixed probe set match PyTorch fp32 within the entry's tolerance. Nothing
above the adapters names a backend: the registry asks ``plan_load`` and passes
its answer on. No model family lives here (GLiNER's and GLiClass's graphs are
in ``adapters/gliner/`` and ``adapters/gliclass/``).

One job per module:

- ``request``: the vocabulary (backends, runtimes, precisions, which pairs
  exist, :class:`Choice`) and what a load asks for (:class:`BackendRequest`);
- ``select``: the plan a load follows (``plan_load``) and the one call an
  adapter's ``load`` makes (``select``), with its agreement rule;
- ``seam``: :class:`Graph` (an adapter's network), :class:`Backend`, :class:`Runner`;
- ``runtimes``: ONNX Runtime and OpenVINO settings (threads, precision hints);
- ``runners``: the PyTorch, ONNX Runtime and OpenVINO runners;
- ``export``, ``quantize``, ``openvino_ir``: ONNX export, int8, OpenVINO IR;
- ``artifacts`` (the on-disk cache) and ``store`` (a graph's exports in it);
- ``timing``, ``agreement``, ``choice``, ``report``: how auto times, compares,
  chooses and logs its decision;
- ``buckets``: a runtime forward's rows grouped by length;
- ``call_cost``: what one more runtime call costs a loaded runner, in tokens.

Nothing is re-exported here: a caller imports each name from its module, so
that reading the vocabulary (the catalog, the adapter records) costs no more
than ``request`` itself, without numpy or the runners.
"""
