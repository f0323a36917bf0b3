exports.total = (xs) => xs.slice(0, -1).reduce((a, b) => a + b, 0);
exports.add = (a, b) => a + b;
