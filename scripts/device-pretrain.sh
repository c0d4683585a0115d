#!/usr/bin/env bash
# Runs ON a lent GPU machine (the device tool), from the repository root, with the kit of
# `python -m training.device.kit prepare --output .device` named in carry. One call trains one slice:
#
#   MINUTES=8 scripts/device-pretrain.sh --training.lr 1e-4 --training.schedule linear
#
# - trains for at most MINUTES minutes (default 8: a call may run 10), resuming the run in
#   RUN (default /tmp/sapbert-pretrain) that an earlier call on the same warm machine left;
#   arguments go to `python -m training.pretrain` (give the same ones in every call);
# - scores the latest model on the dev packs (.device/dev): $OUT/NAME.dev.json;
# - EXPORT=1 (default) returns the model in fp16 as $OUT/NAME.model.tar.NN (≤ 15 MB each) with
#   NAME.metrics.jsonl; EXPORT=0 returns only metrics and dev figures (for side-by-side variants:
#   start several with distinct RUN and NAME in the background, then `wait`).
# Bring the model home with `python -m training.device.kit unpack <files_at> --output runs/<name>`.
set -euo pipefail
RUN=${RUN:-/tmp/sapbert-pretrain}
NAME=${NAME:-pretrain}
MINUTES=${MINUTES:-8}
EXPORT=${EXPORT:-1}
OUT=${OUT:?set OUT to the folder whose files come back}
source "$(dirname "$0")/device-common.sh"

status=0
"$PYTHON" -m training.pretrain --pairs "$KIT/pairs.txt.xz" --model "$KIT/base" --output "$RUN" \
    --resume --training.max_minutes "$MINUTES" "$@" 2> >(quiet_bars) \
    || status=$?
if [ "$status" -ne 0 ]; then
    echo "training exited with $status" >&2
fi
"$PYTHON" -m training.device.kit export "$RUN" "$OUT" --name "$NAME" --packs "$KIT/dev" \
    $([ "$EXPORT" = 1 ] || echo --no-model) || exit 1
exit "$status"
