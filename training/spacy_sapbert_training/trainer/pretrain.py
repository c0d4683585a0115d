"""`python -m spacy_sapbert_training.trainer.pretrain`: self-alignment pretraining on ontology synonym pairs.

    python -m spacy_sapbert_training.trainer.pretrain --pairs corpus/pairs.txt.gz --output training/pretrain \
        --model default --training.max_steps 2000
    torchrun --nproc_per_node 4 -m spacy_sapbert_training.trainer.pretrain --pairs … --output …   # several GPUs
"""
from pathlib import Path

from .loop import make_train_app

DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "pretrain.cfg"
app = make_train_app(str(DEFAULT_CONFIG), "Self-alignment pretraining on synonym pairs (SapBERT).")

if __name__ == "__main__":
    app()
