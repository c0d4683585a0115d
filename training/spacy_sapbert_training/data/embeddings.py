"""Names already encoded by one model, kept on disk, so that key sets and the harness's
dictionaries encode each distinct name once."""
import json
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from spacy_sapbert.cache import cache_dir


class EmbeddingCache:
    """Vectors of names already encoded by one model, kept on disk so that the several
    dictionaries of a benchmark encode each distinct name once."""

    def __init__(self, encoder, folder: Optional[Path] = None):
        self.encoder = encoder
        # An int8 export answers to its source's fingerprint, but its vectors are its own.
        precision = getattr(encoder, "precision", "fp32")
        key = encoder.fingerprint if precision == "fp32" else f"{encoder.fingerprint}-{precision}"
        self.folder = Path(folder or cache_dir() / "embeddings" / key)
        self.folder.mkdir(parents=True, exist_ok=True)
        names_file, vectors_file = self.folder / "names.json", self.folder / "vectors.npy"
        if names_file.exists() and vectors_file.exists():
            self.names: List[str] = json.loads(names_file.read_text(encoding="utf-8"))
            self.vectors = np.load(vectors_file)
        else:
            self.names, self.vectors = [], np.zeros((0, encoder.dim), dtype=np.float32)
        self.row = {name: i for i, name in enumerate(self.names)}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self.row})
        if missing:
            vectors = self.encoder.encode(missing, show_progress=len(missing) > 2000)
            for name in missing:
                self.row[name] = len(self.names)
                self.names.append(name)
            self.vectors = np.vstack([self.vectors, vectors])
            if len(missing) > 2000:
                self.save()
        return self.vectors[[self.row[t] for t in texts]]

    def save(self) -> None:
        (self.folder / "names.json").write_text(json.dumps(self.names, ensure_ascii=False), encoding="utf-8")
        np.save(self.folder / "vectors.npy", self.vectors)
