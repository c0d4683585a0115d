"""An encoder for a model name at a precision (`load_encoder`), and the exact model behind it
(`exact_encoder`), which embeds names."""
import re
from pathlib import Path
from typing import Optional, Union

from .models import resolve_model
from .backends import torch_encoder_module
from .base import MAX_LENGTH, PRECISIONS, EncoderError


def load_encoder(
    model: Union[str, Path],
    precision: str = "fp32",
    pooling: str = "auto",
    max_length: int = MAX_LENGTH,
    device: str = "cpu",
    batch_size: int = 256,
    threads: int = 0,
    calibration: Optional[Union[str, Path]] = None,
):
    """The encoder for `model` at `precision`.

    fp32: the model itself with torch (exact; CPU or GPU). int8: an ONNX Runtime export with
    int8 weights (CPU only; exported on first use and cached). A directory that already is an
    ONNX export loads as one, whatever `precision` says. threads: ONNX Runtime's (0: one per
    core); torch keeps its own setting. calibration: the index (or KB) whose names calibrate an
    int8 export made here (encoders.export.export_onnx); None: the bundled index's.
    """
    from .onnx import OnnxEncoder, is_onnx_dir
    from .export import exported_model

    if precision not in PRECISIONS:
        raise EncoderError(f"Unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}.")
    check_model_source(str(model), hub=precision == "fp32")
    if is_onnx_dir(model) or precision != "fp32":
        if device not in ("cpu", "auto"):  # auto: the CPU, the only device the ONNX path runs on
            raise EncoderError(f"The {precision} ONNX encoder runs on CPU only, not device={device!r}; "
                               "use precision 'fp32' on a GPU.")
        path = exported_model(model, precision, pooling=pooling, max_length=max_length, calibration=calibration)
        encoder = OnnxEncoder(path, pooling=pooling, max_length=max_length, batch_size=batch_size, threads=threads)
        if not is_onnx_dir(model):
            # The export is cached by the model's content, so it may record another copy's path.
            encoder.exported_from = str(model)
        return encoder
    TorchEncoder = torch_encoder_module("precision 'fp32'").TorchEncoder
    return TorchEncoder(model, pooling=pooling, max_length=max_length, device=device, batch_size=batch_size)


# A name of the Hugging Face hub: "owner/name", nothing that reads as a path.
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def check_model_source(model: str, hub: bool) -> None:
    """One sentence, before any model is read, when `model` is neither a folder here nor (with
    `hub`, for fp32) a hub name the hub can be asked for: a path that looks local is never
    looked up on the hub, and an unreachable hub fails at once instead of retrying."""
    path = Path(model).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise EncoderError(f"encoder.model {model!r} is a file, not a model folder; give the folder that holds "
                           "config.json (or one written by `spacy-sapbert export-onnx`).")
    named = ' or name a bundled model ("default", "base")'
    if not hub or not HUB_NAME.fullmatch(model):
        raise EncoderError(f"encoder.model {model!r} is not a folder here ({path.resolve()}); fix the path{named}.")
    if not _on_the_hub(model):
        raise EncoderError(f"encoder.model {model!r} is not a folder here, nor in the Hugging Face cache, and the hub, "
                           f"where it would be a model name, cannot be reached; fix the path{named}, or download the "
                           "model and give its folder.")


def _on_the_hub(model: str) -> bool:
    """Whether the hub name `model` can be loaded: it is in the Hugging Face cache, or the hub
    (HF_ENDPOINT's, where set) answers for it within seconds; never asked when HF_HUB_OFFLINE is
    set. Without huggingface_hub (the runtime install, which loads no hub model) it cannot be."""
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError:
        return False
    if isinstance(huggingface_hub.try_to_load_from_cache(model, "config.json"), str):
        return True
    if constants.HF_HUB_OFFLINE:
        return False
    try:
        huggingface_hub.model_info(model, timeout=3)
    except Exception:  # unreachable, unknown, or refused: one sentence, not the hub's traceback
        return False
    return True


def exact_encoder(encoder):
    """The fp32 torch model whose vector space `encoder` embeds into: itself, the model an int8
    export came from, or a student's teacher (a query encoder trained against frozen keys is the
    student of the keys' model), followed to the model that has no teacher. Names are embedded
    by it, exactly."""
    transformer = torch_encoder_module("embedding names exactly (building an index)")
    ADAPTER_FILE, TorchEncoder = transformer.ADAPTER_FILE, transformer.TorchEncoder

    meta = getattr(encoder, "meta", None)
    if meta is None:
        while getattr(encoder, "teacher_model", None):
            encoder = TorchEncoder(encoder.teacher_model, pooling=encoder.pooling, max_length=encoder.max_length)
        return encoder
    source = Path(resolve_model(getattr(encoder, "exported_from", None) or meta["exact_model"]))
    if not (source / "config.json").exists() and not (source / ADAPTER_FILE).exists():
        raise EncoderError(f"{encoder.name_or_path} was exported from {source}, which is gone, and building "
                           "an index needs that exact model; point `model` at it, or export again.")
    exact = exact_encoder(TorchEncoder(source, pooling=encoder.pooling, max_length=encoder.max_length))
    if exact.fingerprint != encoder.fingerprint:
        raise EncoderError(f"{source} has changed since {encoder.name_or_path} was exported from it; "
                           "export it again.")
    return exact
