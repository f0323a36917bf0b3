"""A tiny library with a planted bug: `total` drops the last item."""


def add(a, b):
    return a + b


def total(items):
    result = 0
    for i in range(len(items) - 1):
        result = add(result, items[i])
    return result
