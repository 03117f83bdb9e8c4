"""Keep scikit-learn and SciPy out of a server that does not use them.

Importing any transformers model imports its text-generation code, whose
assisted-decoding helper imports scikit-learn (and with it pandas and PyArrow)
whenever scikit-learn is installed (sentence-transformers requires it), and its
object-detection losses, which import SciPy's optimizer. Sift neither generates
text nor trains, and those imports cost a quarter of a PyTorch model's start
(docs/benchmarks/test-suite.md has the figures). So transformers' model code is
first imported with both packages hidden: transformers then records them as
absent, which only the features above (and a few vision and audio models Sift
does not serve) read. Both are visible again right after, and an adapter whose
own library imports one of them (SPLADE through sentence-transformers) imports
the real package. Models load in threads: a second load waits here until the
packages are visible again, so it never finds them hidden.
"""

from __future__ import annotations

import importlib
import sys
import threading

# transformers' model code (every model's base, which imports the losses) and the
# assisted-decoding helper (imported when a model class is built).
MODEL_CODE = ("transformers.modeling_utils", "transformers.generation.candidate_generator")
HIDDEN = ("sklearn", "scipy")
_hiding = threading.Lock()


def import_transformers_models() -> None:
    """Import transformers' model code with ``HIDDEN`` hidden, once per process
    (nothing to do when it, or any hidden package, is imported already)."""
    with _hiding:
        if any(name in sys.modules for name in (*MODEL_CODE, *HIDDEN)):
            return
        for name in HIDDEN:
            # A None entry makes ``import name`` fail and ``importlib.util.find_spec`` answer None.
            sys.modules[name] = None  # type: ignore[assignment]
        try:
            for name in MODEL_CODE:
                importlib.import_module(name)
        except ImportError:
            pass  # no transformers: the adapter's own import says so
        finally:
            for name in HIDDEN:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]


def recheck_hidden_packages() -> None:
    """Let transformers look for ``HIDDEN`` again: the lean import left it answering
    "absent" for the life of the process, which OWLv2's image processor (its PIL path
    resizes with ``scipy.ndimage``) reads at every call. Its adapter calls this at load."""
    from transformers.utils import import_utils

    for check in (import_utils.is_scipy_available, import_utils.is_sklearn_available):
        check.cache_clear()
