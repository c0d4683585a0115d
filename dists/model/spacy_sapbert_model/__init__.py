"""The fp32 weights of spacy-sapbert's default model, for linking at precision "fp32" (with
torch) and for exporting or training from it: installed with the `gpu` and `train` extras. The
runtime links with the model's int8 ONNX export, which `spacy_sapbert` ships itself, so a
runtime install stays small. `spacy_sapbert.assets.default_model_path()` finds it here."""
from pathlib import Path

__version__ = "0.2.0"

MODEL = Path(__file__).parent / "model"
