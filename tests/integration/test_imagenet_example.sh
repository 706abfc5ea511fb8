#!/usr/bin/env bash
# examples/imagenet_resnet.sl runs, as it ships, on a folder of JPEGs made here: three class
# folders of photos-like images of mixed sizes (300x200, 500x375, 256x256, ...) go through
# `sluice-record convert images` (TensorFlow's ImageNet feature names, a validation split);
# the validation pipeline yields float32 224x224x3 images with int64 labels, and the full
# ResNet-18 trains 2 steps of batch 4 on the CPU (--set: the files, the batch, steps in
# place of epochs, no checkpoints), reporting its parameter count, finite losses, top-5 and
# a final test accuracy. ResNet-18 at 224x224 is about 5 GFLOP per image forward and
# backward, so the images stay few: 8 trained, 3 evaluated (about 15 s on 2 busy cores).
set -u
SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-stats
command -v cjpeg >/dev/null || { echo "skipped: no cjpeg (libjpeg-turbo-progs) to make JPEGs"; exit 77; }
sl_workdir imagenet

# photo CLASS NAME W H: a W x H color JPEG (diagonal bands that differ by class and size)
photo() {
    mkdir -p "$T/photos/$1"
    LC_ALL=C awk -v w="$3" -v h="$4" -v c="${#1}" 'BEGIN {
        printf "P6\n%d %d\n255\n", w, h
        for (j = 0; j < h; j++) for (i = 0; i < w; i++)
            printf "%c%c%c", (i + j * c) % 200 + 20, (3 * i - j + 600) % 256, (c * 40 + j) % 256
    }' | cjpeg -quality 85 >"$T/photos/$1/$2.jpg"
}
for cls in cat dog heron; do
    photo "$cls" a 300 200
    photo "$cls" b 500 375
    photo "$cls" c 256 256
    photo "$cls" d 333 257
done
# 4 images of each class: 1 to validation, 3 to train (9 train, 3 validation in all)
if run convert 0 "$BIN/sluice-record" convert images "$T/photos" "$T/data" --shards 2 --validation-fraction 0.25; then
    grep -q "^wrote 12 records of 3 classes to $T/data: train 9 in 2 shards, validation 3 in 1 shard " "$T/convert.out" &&
        ok "convert images: 9 train and 3 validation records" || fail_show "convert: unexpected summary" "$T/convert.out"
fi

files=(--set "pipeline.train.files=\"$T/data/train-*.tfrecord\""
       --set "pipeline.validation.files=\"$T/data/validation-*.tfrecord\"")
if run peek 0 "$BIN/sluice-stats" "$SRC/examples/imagenet_resnet.sl" "${files[@]}" --pipeline validation --peek 1; then
    grep -q '^  image  float32\[3,224,224,3\] ' "$T/peek.out" && grep -q '^  label  int64\[3\] ' "$T/peek.out" &&
        ok "validation pipeline: float32 [3,224,224,3] images, int64 labels" || fail_show "peek: unexpected element" "$T/peek.out"
fi

if run train 0 "$BIN/sluice-train" "$SRC/examples/imagenet_resnet.sl" "${files[@]}" \
        --set pipeline.train.batch=4 --set pipeline.validation.batch=3 \
        --set train.epochs=- --set train.steps=2 --set train.checkpoint=none \
        --set train.threads=2 --backend cpu --run-dir "$T/run"; then
    out="$T/train.out"
    # the conv2d layers have biases (4,800 of them) and each batchnorm's running mean and
    # variance are counted: 11,689,512 (torchvision's count) + 4,800 + 9,600
    grep -q '^model resnet18 on cpu: 11703912 parameters; ' "$out" &&
        ok "ResNet-18: 11703912 parameters" || fail_show "parameter count" "$out"
    # the epoch line (2 steps of 9 images in batches of 4: one epoch), then the evaluation's
    # own line; the training loss near ln(1000) = 6.91 (1000 classes, barely trained)
    train_loss=$(sed -n 's/^epoch 1  step 2  loss \([0-9.]*\)  accuracy [0-9.]*  top5 [0-9.]*  .*/\1/p' "$out")
    eval_loss=$(sed -n 's/^eval  step 2  loss \([0-9.]*\)  accuracy [0-9.]*  top5 [0-9.]*$/\1/p' "$out")
    [ -n "$train_loss" ] && [ -n "$eval_loss" ] &&
        awk -v t="$train_loss" -v e="$eval_loss" 'BEGIN { exit !(t > 6.5 && t < 8 && e > 0 && e < 100) }' &&
        ok "finite losses with top-5: train $train_loss, eval $eval_loss" || fail_show "losses" "$out"
    [[ "$(tail -n 1 "$out")" =~ ^test\ accuracy\ [01]\.[0-9]{4}$ ]] &&
        ok "$(tail -n 1 "$out")" || fail_show "no test accuracy line last" "$out"
fi
[ "$fails" = 0 ] || exit 1
