"""`python -m spacy_sapbert_training.trainer.finetune`: fine-tune a pretrained model on (mention, gold synonym) pairs.

    python -m spacy_sapbert_training.trainer.finetune --pairs corpus/ncbi_pairs.txt.gz --output training/finetune \
        --model training/pretrain/model --training.epochs 3
"""
from pathlib import Path

from .loop import make_train_app

DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "finetune.cfg"
app = make_train_app(str(DEFAULT_CONFIG), "Fine-tuning on task mentions paired with gold synonyms.")

if __name__ == "__main__":
    app()
