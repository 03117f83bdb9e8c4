"""``sift serve --frontends N``: the request work (HTTP, decoding, tokenizing, answers) in N
front-end processes, the models in one engine process (docs/benchmarks/frontends.md).

``protocol``: the hand-off messages and their encoding; ``channel``: a framed Unix socket
that sends each loop turn's messages as one frame; ``engine_side``: the engine process's
server (the registry and the models' engines); ``client``: the front-end's stand-in for
``ModelEngine`` and its ingress board; ``frontend_state``: a front-end's serving state;
``child``: the processes' entry points; ``supervisor``: starts them and ends them together.
"""
