"""Suite-wide: nothing may reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Servers and adapters under test run PyTorch fp32 (no probing) unless a test names a backend
# (tests/adapters/test_backends.py covers auto, ONNX Runtime and OpenVINO), and
# exported artifacts never land in the user's cache.
os.environ.setdefault("SIFT_BACKEND", "torch:fp32")
if "SIFT_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["SIFT_CACHE_DIR"] = tempfile.mkdtemp(prefix="sift-test-artifacts-")
