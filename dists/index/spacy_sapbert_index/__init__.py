"""The bundled default index of spacy-sapbert, shipped as a package of its own so that every
distribution file stays under PyPI's 100 MB: MeSH diseases, mental disorders and chemicals and
MONDO, as compact codes with their search graph's links and a names table; `spacy_sapbert`
finds it here (`spacy_sapbert.assets.BUNDLED_INDEX`). It holds data only; its meta.json says
what built it."""
from pathlib import Path

__version__ = "0.2.0"

INDEX = Path(__file__).parent / "index"
