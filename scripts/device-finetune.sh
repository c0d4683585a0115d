#!/usr/bin/env bash
# Runs ON a lent GPU machine (the device tool), from the repository root: the CPU recipe of the
# default (query-side pretraining against the linking KB's frozen keys, then task fine-tuning),
# from the kit's base, at GPU speed. The kit (named in carry) comes from
#
#   python -m training.device.kit prepare --output .device --pairs '' \
#       --datasets ncbi-disease,bc5cdr-disease,bc5cdr-chemical,cadec \
#       --keys corpus/keys/linking-kb,corpus/keys/ncbi-disease,corpus/keys/bc5cdr-disease,corpus/keys/bc5cdr-chemical,corpus/keys/cadec
#
# Key sets travel without their vectors; the first run on a machine embeds them with the kit's
# base (the others wait). Then, in RUN (default /tmp/sapbert-NAME), with --resume:
#   pretrain: training.pretrain --config configs/pretrain-cpu.cfg --keys KIT/keys/linking-kb $PRETRAIN
#   finetune: training.finetune --config configs/finetune-cpu.cfg --keys $FT_KEYS $FINETUNE
# each stage capped at MINUTES_PRETRAIN / MINUTES_FINETUNE (a call runs 10 at most). Returns
# NAME.dev.json (the dev packs, dictionaries embedded by the kit's base as the bundled index is by
# the base; SYMMETRIC=1, for runs that refresh their keys: by the model), NAME.metrics.jsonl and,
# with EXPORT=1, the model's changed tensors in fp16 as NAME.model.tar.NN. Side by side: several
# runs with distinct NAME in the background of one call, then `wait`.
#
#   NAME=default EXPORT=1 scripts/device-finetune.sh
#   NAME=scale PRETRAIN="--training.batch_size 256 --training.epochs 3 --training.max_steps 0" scripts/device-finetune.sh
#
# Here: `python -m training.device.kit unpack <files_at> --name NAME --base base --output runs/NAME`.
set -euo pipefail
NAME=${NAME:-default}
RUN=${RUN:-/tmp/sapbert-$NAME}
PRETRAIN=${PRETRAIN:-}
FINETUNE=${FINETUNE:-}
MINUTES_PRETRAIN=${MINUTES_PRETRAIN:-4}
MINUTES_FINETUNE=${MINUTES_FINETUNE:-4}
SYMMETRIC=${SYMMETRIC:-0}
EXPORT=${EXPORT:-0}
OUT=${OUT:?set OUT to the folder whose files come back}
source "$(dirname "$0")/device-common.sh"
FT_KEYS=${FT_KEYS:-$KIT/keys/ncbi-disease*2,$KIT/keys/bc5cdr-disease,$KIT/keys/bc5cdr-chemical,$KIT/keys/cadec*3}

(
    flock 9
    if [ ! -e "$KIT/keys/.embedded" ]; then
        "$PYTHON" -m training.keys embed "$KIT"/keys/*/ --model "$KIT/base" 2> >(quiet_bars)
        touch "$KIT/keys/.embedded"
    fi
    echo "$NAME: keys ready at ${SECONDS} s"
) 9>"$KIT/keys/.lock"

latest() { "$PYTHON" -c "import sys; from pathlib import Path; from training.device.kit import run_model; print(run_model(Path(sys.argv[1])))" "$1"; }

# shellcheck disable=SC2086  # PRETRAIN and FINETUNE are argument lists
"$PYTHON" -m training.pretrain --config configs/pretrain-cpu.cfg --keys "$KIT/keys/linking-kb" \
    --model "$KIT/base" --output "$RUN/pretrain" --resume --training.max_minutes "$MINUTES_PRETRAIN" \
    $PRETRAIN 2> >(quiet_bars)
echo "$NAME: pretraining done at ${SECONDS} s"
# shellcheck disable=SC2086
"$PYTHON" -m training.finetune --config configs/finetune-cpu.cfg --keys "$FT_KEYS" \
    --model "$(latest "$RUN/pretrain")" --output "$RUN/finetune" --resume \
    --training.max_minutes "$MINUTES_FINETUNE" $FINETUNE 2> >(quiet_bars)
echo "$NAME: fine-tuning done at ${SECONDS} s"
"$PYTHON" -m training.device.kit export "$RUN/finetune" "$OUT" --name "$NAME" --packs "$KIT/dev" --base "$KIT/base" \
    $([ "$SYMMETRIC" = 1 ] || echo --names-model "$KIT/base") $([ "$EXPORT" = 1 ] || echo --no-model)
