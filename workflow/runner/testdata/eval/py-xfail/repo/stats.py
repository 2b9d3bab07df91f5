def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
