"""transformers' model code is imported without scikit-learn and SciPy, which stay importable."""

from __future__ import annotations

import subprocess
import sys
import threading
import types

import pytest

from sift_server.adapters import _lean_imports
from sift_server.adapters._lean_imports import import_transformers_models

CHILD = """
import sys
from sift_server.adapters._lean_imports import import_transformers_models
import_transformers_models()
from transformers import AutoModel, BertConfig
AutoModel.from_config(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8))
print("after models:", sorted(name for name in ("sklearn", "scipy", "pandas", "pyarrow") if name in sys.modules))
import sklearn.metrics, scipy.optimize
print("importable:", sklearn.metrics.roc_curve.__name__, scipy.optimize.linear_sum_assignment.__name__)
"""


def test_a_model_is_built_without_scikit_learn_or_scipy_and_both_stay_importable() -> None:
    # A fresh interpreter: this one has imported them already.
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "after models: []" in result.stdout
    assert "importable: roc_curve linear_sum_assignment" in result.stdout


WATCHED = ("sklearn", "scipy", *_lean_imports.MODEL_CODE)


def _only(monkeypatch: pytest.MonkeyPatch, present: str | None) -> list[tuple[str, list[object]]]:
    """sys.modules with only ``present`` of the watched names; import_module recorded
    (with what the hidden names were while it ran), not run."""
    for name in WATCHED:
        monkeypatch.delitem(sys.modules, name, raising=False)
    if present is not None:
        monkeypatch.setitem(sys.modules, present, types.ModuleType(present))
    calls: list[tuple[str, list[object]]] = []

    def record(name: str) -> None:
        calls.append((name, [sys.modules.get(hidden, "absent") for hidden in _lean_imports.HIDDEN]))

    monkeypatch.setattr(_lean_imports.importlib, "import_module", record)
    return calls


def test_the_model_code_is_imported_with_both_hidden_and_both_visible_after(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _only(monkeypatch, None)
    import_transformers_models()
    assert calls == [(name, [None, None]) for name in _lean_imports.MODEL_CODE]
    assert "sklearn" not in sys.modules and "scipy" not in sys.modules


@pytest.mark.parametrize("present", WATCHED)
def test_nothing_is_hidden_once_one_of_them_is_imported(monkeypatch: pytest.MonkeyPatch, present: str) -> None:
    calls = _only(monkeypatch, present)
    marker = sys.modules[present]
    import_transformers_models()
    assert calls == []
    assert sys.modules[present] is marker


def test_a_second_load_waits_until_the_packages_are_visible_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Models load in threads: one that starts while another is importing transformers' model
    code must not find scikit-learn hidden (SPLADE's library imports it)."""
    _only(monkeypatch, None)
    inside, release = threading.Event(), threading.Event()
    seen: list[object] = []

    def slow_import(name: str) -> None:
        sys.modules[name] = types.ModuleType(name)  # as a real import does, at its start
        inside.set()
        release.wait(5)

    monkeypatch.setattr(_lean_imports.importlib, "import_module", slow_import)
    first = threading.Thread(target=import_transformers_models)
    first.start()
    assert inside.wait(5)

    def second_load() -> None:
        import_transformers_models()
        seen.append(sys.modules.get("sklearn", "absent"))

    second = threading.Thread(target=second_load)
    second.start()
    second.join(0.2)
    assert second.is_alive()  # held while the first still hides the packages
    release.set()
    first.join(5)
    second.join(5)
    assert seen == ["absent"]
