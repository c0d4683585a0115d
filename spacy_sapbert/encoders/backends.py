"""The fp32 torch backend, imported only where torch is installed (the `gpu` or `train` extra)."""
from .base import EncoderError


def _missing(what: str) -> EncoderError:
    return EncoderError(f"{what} needs torch and transformers, which this installation lacks; install them "
                        "with `pip install 'spacy-sapbert[gpu]'`, or link at precision 'int8' with the "
                        "bundled model.")


def check_torch(what: str) -> None:
    """The sentence torch_encoder_module would give, now, without importing torch."""
    from importlib.util import find_spec

    if find_spec("torch") is None or find_spec("transformers") is None:
        raise _missing(what)


def torch_encoder_module(what: str):
    """The fp32 torch backend (encoders.transformer), or one sentence naming the extra that
    brings torch and transformers when this runtime has neither; `what` says what needed it."""
    try:
        from . import transformer
    except ModuleNotFoundError as err:
        if err.name not in ("torch", "transformers", "safetensors"):
            raise
        raise _missing(what) from None
    return transformer
