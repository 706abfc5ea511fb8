# The sequence statements: zip, concatenate, enumerate, unbatch, rebatch, take_while, scan, unique.
pipeline a {
    range 1 4
}
pipeline b {
    range 4 8
}
pipeline zipped {
    zip a b prefix=true
    enumerate start=5 as=step
    take_while step < 7
}
pipeline joined {
    range 0 16
    concatenate a b
    batch 4
    rebatch [2, 1, 1] drop_remainder=false
    unbatch
    scan value sum initial=0 as=running
    unique value
}
pipeline stats {
    range 0 10
    scan value max as=top
    scan value count as=n
    rebatch 3 drop_remainder
}
