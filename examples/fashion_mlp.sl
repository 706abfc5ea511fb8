# Fashion-MNIST with a multilayer perceptron (784-256-128-10, ReLU): the main job's model.
#
#     build/bin/sluice-train examples/fashion_mlp.sl
#
# Reads the TFRecords that `bash scripts/main.sh` (or `sluice-record convert fashion-mnist
# data/fashion --shards 8`) writes; paths are relative to this file. Reaches about 0.89
# test accuracy in 15 epochs on the CPU backend (the Fashion-MNIST benchmark's MLP
# 256-128-100: 0.8833). Checkpoints and TensorBoard event files go to runs/fashion_mlp
# (relative to the current directory); `--resume` continues an interrupted run.

pipeline train {
    files "../data/fashion/train-*.tfrecord"
    shard auto                                  # by file with up to 8 replicas
    interleave cycle=4 block=16 parallel=auto
    shuffle 10000
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1)
        | scale(image, 1/255)  parallel=auto
    batch 128 drop_remainder                    # the global batch: N replicas take 128/N each
    prefetch auto
}

pipeline test {
    files "../data/fashion/test-*.tfrecord"
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 500
    prefetch auto
}

model mlp {
    input 28x28x1
    flatten
    dense 256 activation=relu
    dense 128 activation=relu
    dense 10
}

train {
    model mlp
    data train
    eval test every=1
    epochs 15
    optimizer sgd lr=0.05 momentum=0.9
    schedule cosine
    checkpoint every=1 keep=3
    run_dir "runs/fashion_mlp"
    backend auto
    seed 1
    strategy none
}
