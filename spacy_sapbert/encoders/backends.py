"""The fp32 torch backend, imported only where torch is installed (the `gpu` or `train` extra)."""
from .base import EncoderError


def torch_encoder_module(what: str):
    """The fp32 torch backend (encoders.transformer), or one sentence naming the extra that
    brings torch and transformers when this runtime has neither; `what` says what needed it."""
    try:
        from . import transformer
    except ModuleNotFoundError as err:
        if err.name not in ("torch", "transformers", "safetensors"):
            raise
        raise EncoderError(f"{what} needs torch and transformers, which this installation lacks; install them "
                           "with `pip install 'spacy-sapbert[gpu]'`, or link at precision 'int8' with the "
                           "bundled model.") from None
    return transformer
