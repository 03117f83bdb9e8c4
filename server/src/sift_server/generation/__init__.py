"""Text generation: the routes' bodies and answers (wire.py, answers.py), the plain
rules over them (params.py, text.py, grammar.py), and the seam to the engine that
decodes (engine.py; OpenVINO GenAI in a child process: engine_process.py). Sift never
decodes a token itself: the engine batches, samples and keeps the KV cache."""
