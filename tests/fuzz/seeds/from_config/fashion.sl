# Fashion-MNIST input pipelines in the config language.
#
# The files are what `sluice-record convert fashion-mnist data/fashion --shards 8` writes
# (scripts/main.sh does it); paths are relative to this file's directory, so from a
# checkout run, for example:
#     build/bin/sluice-stats examples/fashion.sl --pipeline train --peek 2 \
#         --set 'pipeline.train.files="../data/fashion/train-*.tfrecord"'
# Each record is a tf.train.Example with `image` (784 raw bytes) and `label` (int64).

pipeline train {
    files "../data/fashion/train-*.tfrecord"
    shard auto                                  # by file with up to 8 replicas, else by record
    interleave cycle=4 block=16 parallel=auto   # read 4 shards at once, 16 records from each in turn
    shuffle 10000 seed=1
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1)
        | scale(image, 1/255)  parallel=auto    # image: float32 in [0, 1]; options end the statement's line
    batch 128 drop_remainder                    # fused with the map: elements go straight into the batch
    prefetch auto
}

pipeline test {
    files "../data/fashion/test-*.tfrecord"     # read in order: no shuffle, no interleave
    shard auto
    map parse_example(image: bytes, label: int64)
        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)
    batch 500
    prefetch auto
}
