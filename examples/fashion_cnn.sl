# Fashion-MNIST with TensorFlow's tutorial CNN: conv 5x5x32 (same, relu), maxpool 2x2,
# conv 5x5x64 (same, relu), maxpool 2x2, dense 1024 relu, dense 10.
#
#     build/bin/sluice-train examples/fashion_cnn.sl
#
# Reads the TFRecords that `bash scripts/main.sh` writes (paths relative to this file).
# Reaches 0.9205 test accuracy in 12 epochs on the CPU backend (target: the Fashion-MNIST
# benchmark's "2 Conv+pooling", 0.916). About 5 TFLOP per epoch: two to three minutes per
# epoch on 2 cores, seconds on a GPU (backend auto picks CUDA when there is one).

pipeline train {
    files "../data/fashion/train-*.tfrecord"
    shard auto
    interleave cycle=4 block=16 parallel=auto
    shuffle 10000
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1)
        | scale(image, 1/255)  parallel=auto
    batch 128 drop_remainder
    prefetch auto
}

pipeline test {
    files "../data/fashion/test-*.tfrecord"
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 125                                   # keeps the evaluation's im2col buffers small
    prefetch auto
}

model cnn {
    input 28x28x1
    conv2d 32 kernel=5x5 padding=same activation=relu
    maxpool 2x2
    conv2d 64 kernel=5x5 padding=same activation=relu
    maxpool 2x2
    flatten
    dense 1024 activation=relu
    dense 10
}

train {
    model cnn
    data train
    eval test every=1
    epochs 12
    optimizer sgd lr=0.02 momentum=0.9
    schedule cosine
    checkpoint every=1 keep=3
    run_dir "runs/fashion_cnn"
    backend auto
    seed 1
    strategy none
}
